#!/usr/bin/env bash
# Builds gradflow's libFuzzer targets (clang, ASan + UBSan, coverage-instrumented) in ./build-fuzz and
# runs each for SECONDS seconds on a scratch copy of its committed seed corpus (fuzz/corpus/<target>),
# so the seeds stay as committed. Prints per target the executions run, the coverage reached and the
# findings, and exits non-zero if any target found something (a crash, a sanitizer report, a broken
# property, a timeout over 10 s or memory over 2 GB) or did not run.
#   bash fuzz/run.sh 60                  # every target, 60 s each
#   bash fuzz/run.sh 300 safetensors     # only the named targets
# Installs Debian's clang and libclang-rt-14-dev (libFuzzer) and the build dependencies listed in
# scripts/setup.sh when missing (as root, or through sudo); GRADFLOW_SKIP_APT=1 skips that.
# Run artifacts (the grown corpus, crash inputs, logs) stay in build-fuzz/runs/<date>/.
set -euo pipefail
cd "$(dirname "$0")/.."

SECS=${1:-60}
shift || true
[[ "$SECS" =~ ^[0-9]+$ ]] && [ "$SECS" -gt 0 ] || { echo "usage: fuzz/run.sh SECONDS [TARGET...]" >&2; exit 2; }

if [ "${GRADFLOW_SKIP_APT:-0}" != 1 ]; then
  # The project's own build dependencies, read from scripts/setup.sh so the list lives in one place.
  eval "$(sed -n '/^PACKAGES=(/,/)/p' scripts/setup.sh)"
  source scripts/lib.sh
  apt_install_missing fuzz "${PACKAGES[@]}" clang libclang-rt-14-dev
fi

CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGRADFLOW_FUZZ=ON >/dev/null
cmake --build build-fuzz --target fuzzers -j"${GRADFLOW_JOBS:-$(nproc)}"

if [ $# -gt 0 ]; then
  targets=("$@")
else
  targets=()
  for f in fuzz/fuzz_*.cpp; do t=$(basename "$f" .cpp); targets+=("${t#fuzz_}"); done
fi

run_dir="build-fuzz/runs/$(date +%Y%m%d-%H%M%S)"
mkdir -p "$run_dir"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export ASAN_OPTIONS="abort_on_error=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"

failed=0
summary=()
for t in "${targets[@]}"; do
  bin="build-fuzz/fuzz/fuzz_$t"
  [ -x "$bin" ] || { echo "fuzz: no target $t ($bin)" >&2; exit 2; }
  dir="$run_dir/$t"
  mkdir -p "$dir/corpus" "$dir/artifacts"
  cp fuzz/corpus/"$t"/* "$dir/corpus/"
  args=(-max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 -close_fd_mask=1 -print_final_stats=1
        -artifact_prefix="$dir/artifacts/")
  [ -f "fuzz/dict/$t.dict" ] && args+=(-dict="fuzz/dict/$t.dict")
  echo "fuzz: $t for ${SECS}s (log $dir/log.txt)"
  rc=0
  "$bin" "${args[@]}" "$dir/corpus" >"$dir/log.txt" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log.txt" | tail -1)
  cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$dir/log.txt" | tail -1 || true)
  corp=$(ls "$dir/corpus" | wc -l)
  findings=$(find "$dir/artifacts" -type f \( -name 'crash-*' -o -name 'timeout-*' -o -name 'oom-*' -o -name 'leak-*' \) | wc -l)
  status="no finding"
  if [ "$findings" -gt 0 ]; then
    status="$findings FINDING(S): $(find "$dir/artifacts" -type f | tr '\n' ' ')"
    failed=1
  elif [ "$rc" -ne 0 ]; then
    status="FAILED (exit $rc, see $dir/log.txt)"
    failed=1
  fi
  summary+=("$(printf '%-14s %12s execs  %-22s corpus %5s  %s' "$t" "${execs:-?}" "${cov:-cov: ?}" "$corp" "$status")")
  if [ "$findings" -gt 0 ] || [ "$rc" -ne 0 ]; then
    grep -E '==[0-9]+==ERROR|runtime error|gradflow fuzz finding|ALARM|out-of-memory|SUMMARY' "$dir/log.txt" | head -5 | sed 's/^/    /' || true
  fi
done

echo
echo "fuzz: ${SECS}s per target; grown corpora, logs and any crash inputs in $run_dir/"
printf '%s\n' "${summary[@]}"
if [ "$failed" -ne 0 ]; then
  echo "fuzz: FINDINGS: reproduce with build-fuzz/fuzz/fuzz_TARGET FILE; commit the input to tests/fuzz_regressions/TARGET/"
  exit 1
fi
echo "fuzz: no findings"
