#!/usr/bin/env bash
# `make test-asan` / `make test-tsan`: the GoogleTest suite and the live-server tests under a
# sanitizer, in their own build tree (build-asan: AddressSanitizer + UndefinedBehaviorSanitizer;
# build-tsan: ThreadSanitizer), with line tables (optimization: below). Every report fails the
# run: the runtimes write them to BUILD/sanitizer-reports/ (the server tests' `mla serve`
# processes included), and the run fails if anything is there at the end, or if a test fails.
# Usage: scripts/test-sanitizer.sh asan|tsan [JOBS]. Suppressions (third-party code only, each
# with its reason): scripts/sanitizer-suppressions/.
set -euo pipefail
KIND=${1:?usage: scripts/test-sanitizer.sh asan|tsan [JOBS]}
JOBS=${2:-$(nproc)}
cd "$(dirname "$0")/.."
# OPT: the tree's optimization; HOT: the compute kernels' (CMakeLists.txt, MLA_HOT_OPT). The
# ASan+UBSan tree compiles at -O0 but for the kernels (-O1): g++ instruments -O0 code in 60% of
# the time (src/server/http_server.cpp: 42 s against 70 s), and the GoogleTest suite's time is in
# the kernels. TSan's compile is cheaper, its
# tests longer (the live-server tests): -O1 throughout. FUZZ: the live fuzz test's case count
# (a parser test, which ASan covers in full; under TSan a case costs 0.5 s).
case "$KIND" in
  asan) SAN=address OPT=-O0 HOT=-O1 FUZZ=400 ;;
  tsan) SAN=thread OPT=-O1 HOT= FUZZ=100 ;;
  *) echo "test-sanitizer: unknown kind '$KIND' (asan or tsan)" >&2; exit 2 ;;
esac
BUILD=build-$KIND
LAUNCHER=()
if command -v ccache > /dev/null; then
  LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=$OPT -g1" \
  "-DCMAKE_C_FLAGS_RELWITHDEBINFO=$OPT -g1" "-DMLA_HOT_OPT=$HOT" -DMLA_SANITIZE="$SAN" -DMLA_BUILD_BENCH=OFF \
  "${LAUNCHER[@]}" > /dev/null
cmake --build "$BUILD" -j "$JOBS" --target mla mla_tests

REPORTS=$PWD/$BUILD/sanitizer-reports
SUPP=$PWD/scripts/sanitizer-suppressions
rm -rf "$REPORTS"
mkdir -p "$REPORTS"
export ASAN_OPTIONS="log_path=$REPORTS/asan:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1"
export LSAN_OPTIONS="suppressions=$SUPP/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="log_path=$REPORTS/ubsan:print_stacktrace=1:halt_on_error=1"
export TSAN_OPTIONS="log_path=$REPORTS/tsan:suppressions=$SUPP/tsan.supp:second_deadlock_stack=1:history_size=4"

# side_by_side NAME FUNCTION LINES: FUNCTION 0 and FUNCTION 1 at once, each writing to
# BUILD/NAME-<i>.log; prints the last LINES of each log and fails if either failed.
side_by_side() {
  local name=$1 fn=$2 lines=$3 rc=0 pids=() i
  for i in 0 1; do
    "$fn" "$i" > "$BUILD/$name-$i.log" 2>&1 &
    pids+=($!)
  done
  for i in 0 1; do
    wait "${pids[$i]}" || rc=1
    tail -n "$lines" "$BUILD/$name-$i.log"
  done
  return $rc
}

status=0
echo "test-$KIND: GoogleTest suite"
# Left out here (they run in `make test`): the three heaviest speculative-decoding tests, the
# chi-square test of speculative sampling (2,800 sampled sequences) and the greedy-identity sweeps
# over K, batch mixes and paths. They drive the same engine and kernels as the other speculative
# and model tests on one thread; under TSan on a 2-core AVX2 machine the suite had run 14 minutes
# and was still inside them. The suite runs as two shards side by side (ctest runs them in parallel too).
FILTER=-SpecEngine.SampledFirstAndSecondTokensFollowThePlainDistribution:Paths/SpecGreedy.*:SpecEngine.StopsInsideAnAcceptedRunCutAsWithoutSpeculation
gtest_shard() {
  GTEST_TOTAL_SHARDS=2 GTEST_SHARD_INDEX=$1 "$BUILD/tests/mla_tests" --gtest_brief=1 "--gtest_filter=$FILTER"
}
side_by_side gtest-shard gtest_shard 40 || status=1

echo "test-$KIND: live-server tests"
# The server tests (errors, fuzzing, lifecycle, faults with a short soak, the openai and anthropic
# clients, the Responses API with the openai and openai-agents clients, prompt logprobs) and mla run, each spawning the sanitized binary. Two pytest processes side by side, each
# with its own files and temporary directory: one alone kept about one core busy (under TSan,
# 745 s of wall for 165 tests and 15 CPU-minutes), the other core waiting. The groups are
# balanced by the durations pytest prints at the end of each.
groups=("tests/py/test_server_fuzz.py tests/py/test_server_faults.py tests/py/test_anthropic_api.py tests/py/test_engine_run.py tests/py/test_prompt_logprobs.py tests/py/test_server_deepseek4.py"
  "tests/py/test_server_lifecycle.py tests/py/test_server_errors.py tests/py/test_server_openai.py tests/py/test_server_basic.py tests/py/test_server_tools.py tests/py/test_responses_api.py tests/py/test_kv_tiers.py")
listed=$(printf '%s\n' ${groups[*]} | sort)
present=$( (ls tests/py/test_server_*.py; echo tests/py/test_anthropic_api.py tests/py/test_responses_api.py tests/py/test_engine_run.py tests/py/test_prompt_logprobs.py tests/py/test_kv_tiers.py | tr ' ' '\n') | sort)
if [ "$listed" != "$present" ]; then
  echo "test-$KIND: the live-server groups above do not list exactly the server test files:" >&2
  diff <(echo "$listed") <(echo "$present") >&2 || true
  status=1
fi
live_group() {
  rm -rf "$BUILD/pytest-$1"
  # shellcheck disable=SC2086  # a group is a list of paths
  MLA_BIN=$PWD/$BUILD/mla MLA_BUILD_DIR=$PWD/$BUILD MLA_SOAK_SECONDS=${MLA_SOAK_SECONDS:-15} \
    MLA_FUZZ_CASES=${MLA_FUZZ_CASES:-$FUZZ} \
    .venv/bin/python -m pytest -q -p no:cacheprovider --durations=8 --basetemp="$BUILD/pytest-$1" ${groups[$1]}
}
side_by_side live live_group 60 || status=1

if compgen -G "$REPORTS/*" > /dev/null; then
  echo "test-$KIND: sanitizer reports:" >&2
  for f in "$REPORTS"/*; do
    echo "== $f" >&2
    head -60 "$f" >&2
  done
  status=1
fi
[ "$status" = 0 ] && echo "test-$KIND: clean"
exit "$status"
