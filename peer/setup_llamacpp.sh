#!/usr/bin/env bash
# Installs llama.cpp as node-llama-cpp ships it (its prebuilt CPU libraries,
# one per x86 level, AVX-512 included; peer/package.json pins the version)
# and builds peer/llamacpp_bench against the headers of the same release,
# read from the git bundle the package carries. scripts/setup.sh runs this;
# the harness lands at build/peer/llamacpp_bench.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -d peer/node_modules ] || [ peer/package-lock.json -nt peer/node_modules ]; then
  npm ci --prefix peer --ignore-scripts --omit=optional --no-audit --no-fund --loglevel=error >/dev/null
  touch peer/node_modules
fi
LIBS=$(cd peer/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64 && pwd)
OUT=build/peer
mkdir -p "$OUT"
if [ ! -f "$OUT/llama.cpp/include/llama.h" ] || [ peer/node_modules -nt "$OUT/llama.cpp/include/llama.h" ]; then
  rm -rf "$OUT/llama.cpp"
  git clone -q --no-checkout peer/node_modules/node-llama-cpp/llama/gitRelease.bundle "$OUT/llama.cpp" 2>/dev/null
  git -C "$OUT/llama.cpp" checkout -q HEAD -- include ggml/include
fi
lib() { ls "$LIBS"/$1 | head -1; }
cc -O2 -std=c11 -Wall -Wextra -DLLAMACPP_BACKENDS="\"$LIBS\"" -o "$OUT/llamacpp_bench" peer/llamacpp_bench.c \
  -I"$OUT/llama.cpp/include" -I"$OUT/llama.cpp/ggml/include" \
  "$(lib 'libllama.v*.so')" "$(lib 'libggml.v*.so')" "$(lib 'libggml-base.so')" -Wl,-rpath,"$LIBS" -lm
