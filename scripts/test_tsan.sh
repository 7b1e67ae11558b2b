#!/usr/bin/env bash
# ThreadSanitizer over the code that runs on several threads: configures build-tsan
# (GRADFLOW_TSAN=ON: -fsanitize=thread -O1 -g1, CMakeLists.txt), builds only what it runs (the
# tests of the threaded kernels, and the gradflow program), runs those tests, then one short
# training run and a decoding pass on 2 threads. Fails on a failing test and on any ThreadSanitizer
# report (reports go to files, one per process, so a report in a child or one a test's exit code
# hides still fails the run). What it checks and what it cannot (OpenBLAS and oneTBB are not
# instrumented): docs/testing.md, "ThreadSanitizer".
#   bash scripts/test_tsan.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
BUILD="$ROOT/build-tsan"
source "$ROOT/scripts/lib.sh"

# Every kernel that splits its work over oneTBB's threads (tensor/parallel.h) has its test here;
# test_decode_batching runs decoding's groups of sentences side by side (parallel_tasks).
TESTS=(test_parallel test_matmul test_softmax test_reduce test_arith test_unary test_layer_norm test_cross_entropy
       test_attention_fused test_dropout test_indexing test_memory test_decode_batching)

start=$SECONDS
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Debug -DGRADFLOW_TSAN=ON >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target gradflow_cli "${TESTS[@]}"
echo "test_tsan: build took $((SECONDS - start)) s"

REPORTS="$BUILD/tsan-reports"
fresh_reports "$REPORTS"
# halt_on_error: the first race stops the process (and fails its test). second_deadlock_stack:
# both stacks of a lock-order inversion. The suppressions file says why each entry is there.
export TSAN_OPTIONS="halt_on_error=1:exitcode=66:second_deadlock_stack=1:history_size=7:log_path=$REPORTS/report:suppressions=$ROOT/scripts/tsan.supp"
export GRADFLOW_TEST_SHORT=1

status=0
start=$SECONDS
regex="^($(IFS='|'; echo "${TESTS[*]}"))\$"
ctest --test-dir "$BUILD" -R "$regex" --output-on-failure -j1 || status=$?
echo "test_tsan: tests took $((SECONDS - start)) s"

# One short training run on 2 threads (every kernel of a training step, validation, the final
# greedy decoding of the test split), then beam-search decoding of its model.
start=$SECONDS
RUN="$(mktemp -d /tmp/gf_tsan_XXXXXX)"
trap 'rm -rf "$RUN"' EXIT
GF="$BUILD/gradflow"
"$GF" corpus --size 600 --out "$RUN/data" >/dev/null || status=$?
"$GF" --threads 2 train --data "$RUN/data" --src en --tgt ko --out "$RUN/run" --d-model 32 --heads 2 --layers 1 --ff 64 \
  --max-tokens 512 --steps 12 --samples 2 --quiet >"$RUN/train.log" 2>&1 || { status=$?; cat "$RUN/train.log"; }
head -20 "$RUN/data/test.en" | "$GF" --threads 2 translate --model "$RUN/run" --beam 3 >/dev/null || status=$?
echo "test_tsan: training and decoding took $((SECONDS - start)) s"

failed=0
scan_reports test_tsan ThreadSanitizer ThreadSanitizer "$REPORTS" || failed=1
status_ok test_tsan "$status" "a test or the training run failed (exit $status)" || failed=1
[ "$failed" = 0 ] || exit 1
echo "test_tsan: every threaded kernel's test, a training run and decoding passed under ThreadSanitizer, no report"
