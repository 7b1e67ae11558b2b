#!/usr/bin/env bash
# The whole test suite under AddressSanitizer (with LeakSanitizer) and UndefinedBehaviorSanitizer:
# configures and builds ./build-asan (GRADFLOW_SANITIZE=ON: -O1 -g1, see CMakeLists.txt) and runs
# every CTest test there. Fails on a failing test and on any sanitizer report, including one from
# a child process (the end-to-end tests run build-asan/gradflow) that a test might not notice:
# ASan/LSan reports are files (any file fails the run), UBSan's exit with code 86 and print a
# "runtime error:" line that is looked for in the whole test log. Measured times: docs/testing.md.
#   bash scripts/test_sanitized.sh                 # build + every quick test, two at a time
#   bash scripts/test_sanitized.sh -R test_arith   # other arguments go to ctest instead of -L quick
# The quick label: every test but the labs' verdicts (test_labs_full; the lab code itself runs in
# the test_lab_* tests) and the browser, which the full check's time budget leaves to the Release run.
# GRADFLOW_TEST_SHORT=1 (set here) gives the few long training tests a smaller budget; every test
# case still runs and asserts (tests/test_budget.h).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
BUILD="$ROOT/build-asan"
source "$ROOT/scripts/lib.sh"

start=$SECONDS
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Debug -DGRADFLOW_SANITIZE=ON >/dev/null
cmake --build "$BUILD" -j"$(nproc)"
echo "test_sanitized: build took $((SECONDS - start)) s"

REPORTS="$BUILD/sanitizer-reports"
fresh_reports "$REPORTS"
# ASan (and LSan) reports go to files, one per process: log_path. GCC's UBSan runtime ignores
# log_path when ASan is linked too (GCC PR 94328) and writes to stderr, and its log_path in
# UBSAN_OPTIONS would redirect ASan's reports instead, so both name the same path. A UBSan report
# is caught by exit code instead: 86, which no gradflow command and no test expects, and by the
# "runtime error:" line in the test log below.
# detect_leaks: LSan at every exit. strict_string_checks: string functions' arguments must be
# NUL-terminated. check_initialization_order/strict_init_order: static initialisation order bugs.
# Not detect_stack_use_after_return: GCC 12's fake stack frames are only 32-byte aligned, and the
# AVX-512 code of -march=native reads 64-byte-aligned locals with aligned loads, which then fault
# (seen in test_bench: a vmovdqa64 from a fake frame, a SEGV that is no bug of the program).
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:abort_on_error=0:strict_string_checks=1:check_initialization_order=1:strict_init_order=1:log_path=$REPORTS/report"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:exitcode=86:log_path=$REPORTS/report"
export GRADFLOW_TEST_SHORT=1

LOG="$BUILD/Testing/Temporary/LastTest.log"  # CTest's log of every test's whole output
status=0
start=$SECONDS
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(-L quick)
ctest --test-dir "$BUILD" -j"$(nproc)" --output-on-failure "${args[@]}" || status=$?
echo "test_sanitized: tests took $((SECONDS - start)) s"

failed=0
scan_reports test_sanitized sanitizer AddressSanitizer/LeakSanitizer "$REPORTS" || failed=1
if grep -q "runtime error:" "$LOG"; then
  grep -n -A3 "runtime error:" "$LOG" || true
  echo "test_sanitized: FAILED: UndefinedBehaviorSanitizer reports above (whole log: $LOG)"
  failed=1
fi
status_ok test_sanitized "$status" "tests failed (ctest exit $status)" || failed=1
[ "$failed" = 0 ] || exit 1
echo "test_sanitized: every test passed under ASan+LSan+UBSan, no sanitizer report"
