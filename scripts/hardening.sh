#!/usr/bin/env bash
# Sanitizers and fuzzers (run by .ci/run after the README's test command).
#
# 1. Builds build-hardening/ with clang, AddressSanitizer + UndefinedBehavior-
#    Sanitizer and libFuzzer coverage (-O1 -g1), and runs the unit and golden
#    tests there: every test of the suite except the timed load tests
#    (ServerLoad: 64 clients for two minutes; Soak: three minutes of mixed load),
#    the released-shape tests (ReleasedShapes: minutes of GEMMs at the real
#    layer shapes, the same code the small cases run sanitized) and the MPI
#    process tests (OpenMPI's own start-up trips LeakSanitizer);
#    the sanitized dsv4 binary serves the CLI and server tests.
# 2. Runs each fuzz target for FUZZ_SECONDS (default 60) from its seed corpus
#    in fuzz/corpus/<name>. A crash fails the run; its input is left in
#    build-hardening/fuzz/crash-<name>-* to be added to fuzz/corpus/<name>
#    (tests/test_fuzz_corpus.cc then replays it in every build).
#
# Longer fuzzing: FUZZ_SECONDS=3600 scripts/hardening.sh fuzz
# Only the sanitizer tests: scripts/hardening.sh tests
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
FUZZ_SECONDS=${FUZZ_SECONDS:-60}

cmake -S . -B build-hardening -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Release \
  "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -g1" -DDSV4_SANITIZE=address,undefined -DDSV4_FUZZ=ON >/dev/null
cmake --build build-hardening -j"$(nproc)"

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:allocator_may_return_null=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export LSAN_OPTIONS=suppressions=$PWD/scripts/lsan.supp:print_suppressions=0

if [[ $what == all || $what == tests ]]; then
  echo "hardening: unit and golden tests under ASan + UBSan"
  # One process per test (a sanitizer report ends only its own test).
  ctest --test-dir build-hardening -j"$(nproc)" -E '^(ServerLoad|Soak|ReleasedShapes|MpiServe)[.]|^Mpi' --output-on-failure
fi

if [[ $what == all || $what == fuzz ]]; then
  for name in safetensors config tokenizer chat_parse request http; do
    echo "hardening: fuzz_$name for ${FUZZ_SECONDS}s"
    work=build-hardening/fuzz/corpus-$name
    mkdir -p "$work"
    log=build-hardening/fuzz/fuzz_$name.log
    build-hardening/fuzz/fuzz_$name -max_total_time="$FUZZ_SECONDS" -print_final_stats=1 -max_len=65536 \
      -artifact_prefix="build-hardening/fuzz/crash-$name-" "$work" "fuzz/corpus/$name" >"$log" 2>&1 || true
    grep -E "^(#[0-9]+ *DONE|stat::number_of_executed_units|==[0-9]+==|SUMMARY|.*ERROR)" "$log" || true
    if ls build-hardening/fuzz/crash-$name-* >/dev/null 2>&1; then
      # The report's stack and the input (as Base64) are in the CI log, so a
      # crash found on a machine we cannot reach can still be reproduced.
      tail -n 60 "$log"
      echo "hardening: fuzz_$name found a crash: $(ls build-hardening/fuzz/crash-$name-*)"
      exit 1
    fi
  done
fi
echo "hardening: ok"
