#!/usr/bin/env bash
# usage: run_and_match.sh REGEX COMMAND...
# Runs COMMAND (mpiexec and its ranks), shows its output, and passes only
# when it exits 0 and its output matches REGEX (Perl, `.` across lines).
# mpiexec exits nonzero when any rank does, so a rank that fails after
# another printed PASS fails the test (ctest's PASS_REGULAR_EXPRESSION alone
# would ignore the exit code).
set -uo pipefail
regex=$1
shift
output=$("$@" 2>&1)
code=$?
printf '%s\n' "$output"
if [[ $code -ne 0 ]]; then
  echo "run_and_match: exit code $code"
  exit 1
fi
if ! printf '%s' "$output" | grep -Pzq "(?s)$regex"; then
  echo "run_and_match: the output does not match: $regex"
  exit 1
fi
