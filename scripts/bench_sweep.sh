#!/usr/bin/env bash
# Training speed and memory as sentences grow and the model widens, gradflow beside the PyTorch
# reference (../shared/reference/torch_translator.py), each measured by its own `bench`:
#   lengths: synthetic sentence pairs of exactly L tokens (L = 32, 128, 510: the positional
#            tables of both hold 512 positions, <bos> and <eos> included), batches of the same
#            --max-tokens, so every step sees about the same number of tokens;
#   widths:  d_model 128, 256, 512 (4 heads, ff 4 x d_model) on the L = 32 data;
#   threads: 1 and 2 at the default width.
# Prints target tokens/s and peak RSS per point, and how RSS grows from L 128 to L 510.
#
#   bash scripts/bench_sweep.sh [--steps N] [--max-tokens T] [--ref PATH] [--gradflow PATH] [--only lengths|widths|threads]
#
# Run it alone on the machine: anything beside it changes the numbers.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
STEPS=10
MAX_TOKENS=4096
REF="$ROOT/../shared/reference/torch_translator.py"
GRADFLOW="$ROOT/build/gradflow"
ONLY=""
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || { echo "bench_sweep: $1 needs a value" >&2; exit 2; }
  case "$1" in
    --steps) STEPS="$2" ;;
    --max-tokens) MAX_TOKENS="$2" ;;
    --ref) REF="$2" ;;
    --gradflow) GRADFLOW="$2" ;;
    --only) ONLY="$2" ;;
    *) echo "bench_sweep: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
[ -f "$REF" ] || { echo "bench_sweep: reference '$REF' not found (use --ref PATH)" >&2; exit 2; }
[ -x "$GRADFLOW" ] || { echo "bench_sweep: '$GRADFLOW' not built" >&2; exit 2; }
WORK="$(mktemp -d /tmp/bench_sweep.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT

# make_data L: enough pairs of exactly L tokens (2,000-word vocabulary) for 3 + STEPS batches.
make_data() {
  local L="$1" dir="$WORK/len$1"
  mkdir -p "$dir"
  /usr/bin/python3 - "$dir" "$L" "$(( (STEPS + 4) * MAX_TOKENS / L + 8 ))" <<'EOF'
import random, sys
d, L, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(L)
for side in ("de", "en"):
    with open(f"{d}/train.{side}", "w") as f:
        for _ in range(n):
            f.write(" ".join(f"w{rng.randrange(2000)}" for _ in range(L)) + "\n")
EOF
  echo "$dir"
}

echo "== $("$GRADFLOW" info | head -3 | tr '\n' ' ')"
echo "== OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-(unset)}; $STEPS timed steps of <= $MAX_TOKENS tokens"
printf '%-26s %12s %12s %10s %12s %12s %10s\n' point "torch tok/s" "gf tok/s" ratio "torch MiB" "gf MiB" "RSS ratio"

# point NAME DATA THREADS [model flags...]: both benches, one line.
declare -A RSS_T RSS_G
point() {
  local name="$1" data="$2" threads="$3"
  shift 3
  local t g
  t="$(/usr/bin/python3 "$REF" bench --data "$data" --threads "$threads" --steps "$STEPS" --max-tokens "$MAX_TOKENS" --min-freq 1 "$@" | tail -n 1)"
  # float32 as the reference (a later --precision among the model flags overrides it)
  g="$("$GRADFLOW" bench train --precision fp32 --data "$data" --threads "$threads" --steps "$STEPS" --max-tokens "$MAX_TOKENS" --min-freq 1 "$@" | tail -n 1)"
  /usr/bin/python3 - "$name" "$t" "$g" <<'EOF'
import json, sys
name, t, g = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
print(f"{name:<26} {t['tgt_tokens_per_s']:>12.1f} {g['tgt_tokens_per_s']:>12.1f} {g['tgt_tokens_per_s'] / t['tgt_tokens_per_s']:>10.2f} "
      f"{t['peak_rss_mib']:>12.1f} {g['peak_rss_mib']:>12.1f} {g['peak_rss_mib'] / t['peak_rss_mib']:>10.2f}")
EOF
  RSS_T[$name]="$(printf '%s' "$t" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["peak_rss_mib"])')"
  RSS_G[$name]="$(printf '%s' "$g" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["peak_rss_mib"])')"
}

if [ -z "$ONLY" ] || [ "$ONLY" = lengths ]; then
  for L in 32 128 510; do point "length $L" "$(make_data "$L")" 2; done
  /usr/bin/python3 -c "import sys; t1, t2, g1, g2 = map(float, sys.argv[1:]); print(f'peak RSS from length 128 to 510: PyTorch x{t2 / t1:.2f}, gradflow x{g2 / g1:.2f}')" \
    "${RSS_T[length 128]}" "${RSS_T[length 510]}" "${RSS_G[length 128]}" "${RSS_G[length 510]}"
fi
if [ -z "$ONLY" ] || [ "$ONLY" = widths ]; then
  D32="$(make_data 32)"
  for d in 128 256 512; do point "d_model $d" "$D32" 2 --d-model "$d" --heads 4 --ff $((4 * d)); done
fi
if [ -z "$ONLY" ] || [ "$ONLY" = threads ]; then
  D32="${D32:-$(make_data 32)}"
  for th in 1 2; do point "threads $th" "$D32" "$th"; done
fi
