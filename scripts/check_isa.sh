#!/usr/bin/env bash
# Checks that a dsv4 binary runs on any x86-64 CPU: AVX-512 instructions
# (EVEX-encoded, first opcode byte 0x62) only in functions of the AVX-512
# kernels (namespace dsv4::kernels::avx512, src/kernels/avx512), and AVX/AVX2
# instructions (VEX-encoded, 0xC4/0xC5) only there or in the AVX2 kernels
# (dsv4::kernels::avx2). Those run only on CPUs that have the instruction
# set (src/kernels/dispatch.h); an inline function the linker took from an
# ISA unit, or a build with -march=native, shows up here.
# usage: scripts/check_isa.sh [BINARY]   (default build/dsv4); exit 1 on a stray
set -euo pipefail
binary=${1:-build/dsv4}
[[ -x $binary ]] || { echo "check_isa: no binary at $binary" >&2; exit 2; }

objdump -d -C "$binary" 2>/dev/null | awk '
  # A function: "0000000000401000 <name>:"
  /^[0-9a-f]+ <.*>:$/ { fn = substr($0, index($0, "<") + 1); sub(/>:$/, "", fn); off = 0; data = 0; next }
  # An instruction: "  401000:\t62 f1 ...\tvmovaps ..." (continuation lines have no third field)
  /^ *[0-9a-f]+:\t/ {
    n = split($0, field, "\t")
    nb = split(field[2], byte, " ")
    at = off
    off += nb
    # clang'"'"'s -fsanitize=function starts a function with a jump over six
    # bytes of signature data (eb 06 ...); objdump decodes them (and the
    # first real bytes) as instructions, a VEX one when the type hash holds
    # c4 or c5.
    if (at == 0 && byte[1] == "eb" && byte[2] == "06") data = 8
    if (n < 3 || at < data) next
    # Bytes objdump cannot decode are data inside the text (e.g. the
    # signature clang'"'"'s -fsanitize=function puts before a function), not
    # instructions.
    if (field[3] ~ /\(bad\)/) next
    i = 1
    while (byte[i] ~ /^(2e|3e|26|36|64|65|66|67|f0|f2|f3)$/) i++  # legacy prefixes
    kind = byte[i] == "62" ? "avx512" : (byte[i] == "c4" || byte[i] == "c5") ? "avx" : ""
    if (kind == "") next
    allowed = fn ~ /dsv4::kernels::avx512::/ || (kind == "avx" && fn ~ /dsv4::kernels::avx2::/)
    if (!allowed && !(fn in seen)) { seen[fn] = 1; printf "check_isa: %s instruction outside its kernels in %s\n", kind, fn; bad = 1 }
    if (kind == "avx512") evex++
    else vex++
  }
  END {
    if (bad) exit 1
    printf "check_isa: ok (%d AVX-512 and %d AVX instructions, all in the ISA kernels)\n", evex, vex
  }'
