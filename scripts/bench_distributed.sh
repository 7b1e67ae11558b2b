#!/usr/bin/env bash
# Data-parallel training speed on this machine: one process with 2 threads against two processes
# (mpirun -np 2) with 1 thread each, on the same global batches, for a fixed number of steps.
# Prints target tokens/s of each and, for two processes, the share of step time in the gradient
# allreduce. Run it on a quiet machine: anything else compiling or training makes it meaningless.
#   bash scripts/bench_distributed.sh [STEPS] [ROUNDS]     (defaults: 60 steps, 2 rounds, alternating)
# Data: ../shared/data/multi30k (de -> en, the README's default model, 10.6M parameters) when it
# exists, else the built-in corpus with its smaller default model.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-60}
rounds=${2:-2}
bin=./build/gradflow
[ -x "$bin" ] || { echo "bench_distributed: build first (bash scripts/setup.sh)"; exit 1; }
command -v mpirun >/dev/null || { echo "bench_distributed: mpirun not found (apt-get install openmpi-bin libopenmpi-dev, then rebuild)"; exit 1; }
"$bin" info | grep -q "data-parallel training: MPI" || { echo "bench_distributed: $bin was built without MPI"; exit 1; }

data=../shared/data/multi30k
if [ -d "$data" ]; then
  what="Multi30k de->en (default model)"
  data_args=(--data "$data" --src de --tgt en)
else
  what="built-in corpus (its default model)"
  data_args=()
fi
global_tokens=4096  # the default --max-tokens: one process's batch, and the two processes' global batch
root_flag=()
[ "$(id -u)" = 0 ] && root_flag=(--allow-run-as-root)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# One progress line, at the last step: its tok/s is the epoch's target tokens over the time since
# the epoch started, so the steps only (no setup, no final checkpoint).
common=(train "${data_args[@]}" --steps "$steps" --log-every "$steps" --samples 0 --seed 1)

# "epoch 1 batch 60/226 step 60 loss 6.1 lr 7.5e-05 2356 tok/s ETA 3m" -> 2356
tokens_per_s() { grep -o '[0-9]* tok/s' "$1" | tail -1 | cut -d' ' -f1; }

echo "bench_distributed: $what, $steps steps, global batches of <= $global_tokens tokens, $(nproc) cores"
for round in $(seq "$rounds"); do
  rm -rf "$tmp/one" "$tmp/two"
  "$bin" --threads 2 "${common[@]}" --max-tokens "$global_tokens" --out "$tmp/one" >"$tmp/one.log" 2>&1
  echo "round $round: -np 1, 2 threads:  $(tokens_per_s "$tmp/one.log") target tokens/s"
  # Each rank bound to its own core (mpirun's default for 2 ranks), one thread each.
  mpirun "${root_flag[@]}" -np 2 --bind-to core "$bin" --threads 1 "${common[@]}" --max-tokens $((global_tokens / 2)) --out "$tmp/two" \
    >"$tmp/two.log" 2>&1
  share=$(sed -n 's/.*processes: allreduce \([0-9.]*%\) of step time (\([0-9.]*\) ms a step.*/\1 of step time (\2 ms a step)/p' "$tmp/two.log")
  echo "round $round: -np 2, 1 thread each: $(tokens_per_s "$tmp/two.log") target tokens/s, allreduce $share"
done
echo "(tokens/s: target tokens over the time of the steps, the first included; allreduce: packing, MPI_Allreduce and"
echo " unpacking of the gradient buckets, waiting for the slower process included, as a share of the steps' time)"
