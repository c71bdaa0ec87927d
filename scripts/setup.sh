#!/usr/bin/env bash
# Installs every dependency from Debian packages (only what is missing), then
# configures and builds dsv4 into build/. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake g++ make pkg-config libgtest-dev libbenchmark-dev nlohmann-json3-dev libpcre2-dev libicu-dev libhwloc-dev libboost-dev libopenmpi-dev openmpi-bin
          clang libclang-rt-dev  # clang: the sanitizer and fuzzer build (scripts/hardening.sh)
          chromium)              # the chat page's browser test (puppeteer-core drives it)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The JavaScript peers the tests compare against (tokenizer, the client
# SDKs, ajv) and puppeteer-core for the browser test.
if ! command -v npm >/dev/null 2>&1; then
  echo "setup: installing nodejs and npm"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq nodejs npm >/dev/null
fi
if [ ! -d tests/js/node_modules ] || [ tests/js/package-lock.json -nt tests/js/node_modules ]; then
  npm ci --prefix tests/js --no-audit --no-fund --loglevel=error >/dev/null
fi

# llama.cpp as node-llama-cpp ships it, and the C harness that times it on
# the same weights (dsv4 bench --peer-gguf; the converter's tests).
./peer/setup_llamacpp.sh

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
# Two cores: one build job per core.
cmake --build build -j"$(nproc)"
