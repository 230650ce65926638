#!/usr/bin/env bash
# Runs the libFuzzer targets (built by `make fuzz` with ASan+UBSan) for RUNS executions each,
# seeded from the checked-in corpus. New inputs go to fuzz/corpus-work/ (ignored by git); any
# crash is saved as fuzz/corpus-work/crash-* and fails the run.
set -euo pipefail
BUILD=${1:-build-fuzz}
RUNS=${2:-10000000}
cd "$(dirname "$0")/.."
mkdir -p fuzz/corpus-work/gguf fuzz/corpus-work/tokenizer fuzz/corpus-work/request
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export ASAN_OPTIONS=detect_leaks=1
"$BUILD/fuzz/fuzz_gguf" -runs="$RUNS" -max_len=65536 -print_final_stats=1 \
  -artifact_prefix=fuzz/corpus-work/ fuzz/corpus-work/gguf tests/fixtures/gguf-bad
# The tokenizer target does much more per input (pre-tokenizer, BPE, detokenizer): fewer runs.
"$BUILD/fuzz/fuzz_tokenizer" -runs="$(( RUNS / 50 ))" -max_len=4096 -print_final_stats=1 \
  -artifact_prefix=fuzz/corpus-work/ fuzz/corpus-work/tokenizer tests/fixtures/tokenizer-seeds
# The request parsers alone (RequestParserHarness in fuzz/request_harness.h): the full RUNS.
"$BUILD/fuzz/fuzz_request_parser" -runs="$RUNS" -max_len=8192 -print_final_stats=1 \
  -artifact_prefix=fuzz/corpus-work/ fuzz/corpus-work/request tests/fixtures/request-seeds
# The whole request side (the same parsers, then the chat template and the SSE writer): a twentieth.
"$BUILD/fuzz/fuzz_request" -runs="$(( RUNS / 20 ))" -max_len=8192 -print_final_stats=1 \
  -artifact_prefix=fuzz/corpus-work/ fuzz/corpus-work/request tests/fixtures/request-seeds
