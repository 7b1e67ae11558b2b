#!/usr/bin/env bash
# The Release suite (./build) again under each OpenBLAS kernel this CPU can run, set with
# OPENBLAS_CORETYPE: Haswell (AVX2), SkylakeX (AVX-512) and Cooperlake (AVX-512 with BF16). The
# kernels sum a product's terms in different orders (docs/testing.md, "Results across OpenBLAS
# kernels"), and development machines of one kind differ in which one OpenBLAS picks, so a test
# that leaned on one kernel's rounding passes on one machine and fails on the next. The test
# command's own run covers OpenBLAS's own choice; this covers the others.
# The quick label (every test but the labs' verdicts and the browser; docs/testing.md), with
# GRADFLOW_TEST_SHORT=1 for the trained translator's budget: the labs' verdicts run once, under
# OpenBLAS's own kernel, in the test command's Release run (the full check's time budget).
#   bash scripts/test_blas_cores.sh              # every kernel this CPU runs, -L quick
#   bash scripts/test_blas_cores.sh -R test_decode   # other arguments go to ctest instead of -L quick
#   bash scripts/test_blas_cores.sh --others     # all but the kernel this environment gives (the
#                                                # full check's: its test command just ran under it)
set -euo pipefail
cd "$(dirname "$0")/.."
others=0
if [ "${1:-}" = --others ]; then others=1; shift; fi
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(-L quick)
[ -x build/gradflow ] || { echo "test_blas_cores: build/gradflow is missing: run bash scripts/setup.sh first" >&2; exit 1; }

flags=$(grep -m1 '^flags' /proc/cpuinfo)
has() { [[ " $flags " == *" $1 "* ]]; }
cores=()
has avx2 && has fma && cores+=(Haswell)
has avx512f && has avx512bw && has avx512dq && has avx512vl && cores+=(SkylakeX)
has avx512f && has avx512_bf16 && cores+=(Cooperlake)
[ ${#cores[@]} -gt 0 ] || { echo "test_blas_cores: this CPU runs none of Haswell, SkylakeX, Cooperlake; nothing to do"; exit 0; }

# The kernel OpenBLAS runs: in this environment as it is, or with OPENBLAS_CORETYPE=$1.
kernel_in_use() {
  if [ $# -gt 0 ]; then OPENBLAS_CORETYPE=$1 build/gradflow info; else build/gradflow info; fi |
    sed -n 's/^openblas core: \([A-Za-z]*\).*/\1/p'
}
own=$(kernel_in_use)
failed=() ran=()
for core in "${cores[@]}"; do
  if [ "$others" = 1 ] && [ "$core" = "$own" ]; then
    echo "test_blas_cores: $core is this environment's own kernel, which the test command's ctest run covered"
    continue
  fi
  start=$SECONDS
  in_use=$(kernel_in_use "$core")
  if [ "$in_use" != "$core" ]; then
    echo "test_blas_cores: OPENBLAS_CORETYPE=$core gave the $in_use kernel" >&2
    failed+=("$core")
    continue
  fi
  echo "test_blas_cores: OPENBLAS_CORETYPE=$core"
  if OPENBLAS_CORETYPE=$core GRADFLOW_TEST_SHORT=1 ctest --test-dir build -j"$(nproc)" --output-on-failure "${args[@]}"; then
    echo "test_blas_cores: $core passed in $((SECONDS - start)) s"
    ran+=("$core")
  else
    failed+=("$core")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "test_blas_cores: FAILED under ${failed[*]}"
  exit 1
fi
echo "test_blas_cores: the suite passed under ${ran[*]}"
