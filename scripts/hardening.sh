#!/usr/bin/env bash
# Sanitizers and fuzzers (run by .ci/run after the README's test command).
#
# 1. Builds build-hardening/ with clang, AddressSanitizer + UndefinedBehavior-
#    Sanitizer and libFuzzer coverage (the core -O3, the tests' own code
#    unoptimized: tests/CMakeLists.txt), and runs there what must be
#    sanitized (no wall-clock bound is asserted there: testing::kTimed): every unit, server, front-end, parser, cache, scheduler and
#    engine test, the kernels against the generic path, the golden cases on
#    one rank and on two parallel layouts. Left to the README's run (the
#    same code, unsanitized): the timed load tests (ServerLoad, Soak), the
#    released-shape tests (minutes of GEMMs at the real layer shapes), the
#    other parallel layouts and chunkings of the golden cases (of V4.1's,
#    all but one split and one engine mode per case, and verify's CLI; the
#    engine's batching and page-pressure cases on small_real; DSpark served
#    over ranks and verify's canonical layout, whose parallel code runs
#    sanitized in GoldenParallel and DSpark.GoldenOnTensorParallelRanks), the
#    statistical tests that sample thousands of tokens to check a
#    distribution (their code paths run sanitized in the shorter speculative
#    tests), the browser test of the chat page, the SDK clients against the
#    DeepSeek tokenizer.json (the same clients run sanitized on the default
#    model's tokenizer, the tokenizer in the other real-tokenizer tests), the
#    default model's held-out requests (checks of what it and its drafters learned; the
#    same server paths run sanitized in the shorter default-model tests), the
#    benchmarks' output checks, the ISA checks of the release binary, llama.cpp's runs, and the
#    MPI process tests (OpenMPI's own start-up trips LeakSanitizer). The
#    sanitized dsv4 binary serves the CLI and server tests.
# 2. Runs each fuzz target for FUZZ_SECONDS (default 30), as many at once as
#    there are cores, from its seed corpus
#    in fuzz/corpus/<name>. A crash (or any other nonzero exit) fails the run; its input is left in
#    build-hardening/fuzz/crash-<name>-* to be added to fuzz/corpus/<name>
#    (tests/test_fuzz_corpus.cc then replays it in every build).
#
# Longer fuzzing: FUZZ_SECONDS=3600 scripts/hardening.sh fuzz
# Only the sanitizer tests: scripts/hardening.sh tests
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
FUZZ_SECONDS=${FUZZ_SECONDS:-30}

cmake -S . -B build-hardening -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Release \
  -DDSV4_SANITIZE=address,undefined -DDSV4_FUZZ=ON >/dev/null
cmake --build build-hardening -j"$(nproc)"

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:allocator_may_return_null=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export LSAN_OPTIONS=suppressions=$PWD/scripts/lsan.supp:print_suppressions=0

if [[ $what == all || $what == tests ]]; then
  echo "hardening: unit and golden tests under ASan + UBSan"
  # The tests left to the README's run (see above), as extended regular
  # expressions over the test names.
  unsanitized=(
    '^(ServerLoad|Soak|ReleasedShapes|MpiServe)[.]' '^Mpi'
    '^PortableBinary[.]' '^PackedMatmul[.]IsaIsChosenOnceAndOverridable$' '^GgufConvert[.]LlamaCpp' '^BenchCli[.]'
    '^FrontEnd[.]ChatPageInAHeadlessBrowser$' '^VerifyGate[.]Mpi' '^RealTokenizerServer[.]OfficialClientsAndStructuredOutputs$'
    'SpeculativeSampling[.]OutputKeepsItsDistribution' '^DefaultModelApi[.](AnswersHeldOutArithmeticAndToolRequests|TrainedDraftersAreMostlyAccepted)$'
    '^DSparkServing[.](AnAgreeingDrafterIsAcceptedAndKeepsTheDistribution|SampledOutputKeepsItsDistribution)$'
    '^DSparkServing[.](SampledDraftsComeFromTheDistributionVerificationUses|GreedyOutputIsPlainDecodingsWithAnyNumberOfDrafts)$'
    'GoldenParallel[.]MatchesReference/(tiny|small_real_tp[14]|small_real_tp2_dp1|small_fp8_tp[12]|small_fp8_tp4_dp1)'
    'GoldenParallel[.]MatchesReference/.*(_fast|chunk0_flashcomm1_2|_dp4_ep16_chunk0)$'
    'GoldenFast[.]WithinTheBoundsOfAnyCorrectImplementation/.*_chunk(0|1|64)$'
    'EngineBatchingFast[.]SameBitsInAnyBatchChunkingOrPreemption/small'
    '^Golden/(EngineBatching|EnginePagePressure)[.].*/small_real$' '^Cases/GoldenFast[.].*/small_real_chunk7$'
    '^Cases/V41Golden[.]PrefillAndDecodeAreTheReferencesBitForBit/(Tiny_(Whole|Chunks1|Chunks64|Whole_Packed|Chunks7_Packed)|Fp8_(Whole|Chunks1|Chunks7|Chunks64|Whole_Packed)|Prefix_(Whole|Chunks1|Chunks64|Whole_Packed|Chunks7_Packed))$'
    '^Cases/V41Engine[.]GeneratesTheReferencesGreedyTokens/(Tiny_(Packed|Chunks64|DSpark3)|Fp8_(Packed|Chunks7|Chunks64))$'
    '^V41Golden[.]VerifyCliPassesTheCasesInEitherNumericsAndOnRanks$'
    '^Cases/V41Layouts[.]GenerateTheReferencesGreedyTokens/(Tiny_.*|Fp8_DP2xEP2|Fp8_DP4xEP4Chunks7|Fp8_TP4DSpark3)$'
    '^V41Golden[.]ParallelRanksAreTheReferencesBitForBit$' '^SyntheticV41[.]PrefixCacheHitsGenerateWhatTheComputedPromptDoes$'
    '^DSparkServing[.]RanksAsThreadsGiveTheSameTokens$' '^ParallelCli[.]VerifyOnTheCanonicalLayoutWithFlashComm1$'
  )
  pattern=$(IFS='|'; echo "${unsanitized[*]}")
  keep=()
  names=()
  while read -r number name; do
    names+=("$name")
    [[ $name =~ $pattern ]] || keep+=("$number")
  done < <(ctest --test-dir build-hardening -N | sed -nE 's/^ *Test +#([0-9]+): ([^ ]+).*/\1 \2/p')
  total=${#names[@]}
  # A pattern that names no test was left behind by a rename: the renamed
  # test would run sanitized unnoticed (and grow CI's time).
  for p in "${unsanitized[@]}"; do
    found=0
    for name in "${names[@]}"; do [[ $name =~ $p ]] && { found=1; break; }; done
    ((found)) || { echo "hardening: the pattern '$p' names no test (renamed?)"; exit 1; }
  done
  numbers=$(IFS=','; echo "${keep[*]}")
  echo "hardening: ${#keep[@]} of $total tests run sanitized"
  # One process per test (a sanitizer report ends only its own test).
  ctest --test-dir build-hardening -j"$(nproc)" -I "0,0,0,$numbers" --output-on-failure
fi

if [[ $what == all || $what == fuzz ]]; then
  # One fuzzer per core at a time (each is one process on one thread).
  fuzz_one() {
    local name=$1 work=build-hardening/fuzz/corpus-$1 log=build-hardening/fuzz/fuzz_$1.log
    mkdir -p "$work"
    build-hardening/fuzz/fuzz_$name -max_total_time="$FUZZ_SECONDS" -print_final_stats=1 -max_len=65536 \
      -artifact_prefix="build-hardening/fuzz/crash-$name-" "$work" "fuzz/corpus/$name" >"$log" 2>&1
  }
  names=(safetensors config tokenizer chat_parse request http)
  declare -A pids
  for name in "${names[@]}"; do
    while (($(jobs -rp | wc -l) >= $(nproc))); do wait -n || true; done
    echo "hardening: fuzz_$name for ${FUZZ_SECONDS}s"
    fuzz_one "$name" &
    pids[$name]=$!
  done
  failed=0
  for name in "${names[@]}"; do
    code=0
    wait "${pids[$name]}" || code=$?
    log=build-hardening/fuzz/fuzz_$name.log
    echo "hardening: fuzz_$name:"
    grep -E "^(#[0-9]+ *DONE|stat::number_of_executed_units|==[0-9]+==|SUMMARY|.*ERROR)" "$log" || true
    if [[ $code -ne 0 ]] || ls build-hardening/fuzz/crash-$name-* >/dev/null 2>&1; then
      # The report's stack and the input (as Base64) are in the CI log, so a
      # crash found on a machine we cannot reach can still be reproduced.
      tail -n 60 "$log"
      echo "hardening: fuzz_$name exited with $code; its crash input: $(ls build-hardening/fuzz/crash-$name-* 2>/dev/null || echo none)"
      failed=1
    fi
  done
  ((failed == 0)) || exit 1
fi
echo "hardening: ok"
