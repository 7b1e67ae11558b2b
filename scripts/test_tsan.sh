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
# test_decode_batching runs decoding's groups of sentences side by side (parallel_tasks);
# test_bf16 the bfloat16 products (oneDNN's OpenMP threads, the tile kernel cut over oneTBB, the
# weight cache's mutex); test_optim the optimizer's threaded gradient norm and step; test_run_lock
# the run folder's lock (threads of one process share it, another process is refused);
# test_translate_stream translate's reader and decoder on a live pipe.
TESTS=(test_parallel test_matmul test_softmax test_reduce test_arith test_unary test_layer_norm test_cross_entropy
       test_attention_fused test_dropout test_indexing test_memory test_decode_batching
       test_bf16 test_optim test_run_lock test_translate_stream)

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
  --max-tokens 512 --steps 12 --samples 2 --precision fp32 --quiet >"$RUN/train.log" 2>&1 || { status=$?; cat "$RUN/train.log"; }
head -20 "$RUN/data/test.en" | "$GF" --threads 2 translate --model "$RUN/run" --precision fp32 --beam 3 >/dev/null || status=$?
# The same in bfloat16 (natively where the CPU has AVX512-BF16, else on the portable path: `gradflow
# info` says which): oneDNN's products or the portable sgemms inside training and decoding, the
# weight cache shared by the decoding threads.
"$GF" --threads 2 train --data "$RUN/data" --src en --tgt ko --out "$RUN/run16" --d-model 32 --heads 2 --layers 1 --ff 64 \
  --max-tokens 512 --steps 12 --samples 2 --precision bf16 --quiet >"$RUN/train16.log" 2>&1 || { status=$?; cat "$RUN/train16.log"; }
head -20 "$RUN/data/test.en" | "$GF" --threads 2 translate --model "$RUN/run16" --precision bf16 --beam 3 >/dev/null || status=$?
# One lab end to end (its seeds' training runs, the report's statistics), at a tiny size.
lab_status=0
"$GF" --threads 2 lab smoothing --seeds 2 --steps 20 --eval-every 10 --train 100 --eval 50 --feature-seqs 50 --out "$RUN/lab" >"$RUN/lab.log" 2>&1 || lab_status=$?
# What is checked here is the threads, not the verdict (20 steps settle nothing): exit 0, 3 or 4 is
# a lab that ran to its verdict; any other code (a crash, a ThreadSanitizer exit) fails the run.
case $lab_status in 0|3|4) ;; *) status=$lab_status; cat "$RUN/lab.log" ;; esac
echo "test_tsan: training, decoding and a lab took $((SECONDS - start)) s"

failed=0
scan_reports test_tsan ThreadSanitizer ThreadSanitizer "$REPORTS" || failed=1
status_ok test_tsan "$status" "a test or the training run failed (exit $status)" || failed=1
[ "$failed" = 0 ] || exit 1
echo "test_tsan: every threaded kernel's test, a training run and decoding passed under ThreadSanitizer, no report"
