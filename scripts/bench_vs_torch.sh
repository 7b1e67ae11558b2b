#!/usr/bin/env bash
# gradflow and the PyTorch reference side by side, on the same data, settings and machine:
# training throughput (target tokens/s), the share of the machine's sgemm peak it reaches (mfu),
# peak resident memory, and fixed-length greedy decoding (sentences/s) against both PyTorch
# decoders: the reference's plain one (the whole prefix every step) and its `decode --cache` (a
# key/value cache, as a careful PyTorch user writes it); and gradflow's beam 5 against its greedy.
# Each round runs both programs, in alternating order so that drifting machine noise hits both;
# the summary is the median per metric and the ratio gradflow / PyTorch.
#
#   bash scripts/bench_vs_torch.sh DATA_DIR [--rounds R] [--steps N] [--threads T]
#                                  [--decode-batch B] [--ref PATH] [--gradflow PATH] [--out FILE]
#                                  [--precision fp32|bf16|auto] [--blas-core NAME|native]
#
# gradflow runs --precision fp32 unless told otherwise, as the reference runs float32 (gradflow's
# own default, auto, would choose bf16 on a CPU where it pays).
# DATA_DIR holds train.de/train.en and test_2016_flickr.de (e.g. Multi30k). The reference is
# ../shared/reference/torch_translator.py from the repository root unless --ref says otherwise; it
# runs with Debian's /usr/bin/python3 and python3-torch.
# One OpenBLAS kernel for both programs, so that the ratio compares programs, not kernels: the
# script exports OPENBLAS_CORETYPE for both. --blas-core NAME sets it (Haswell, SkylakeX,
# Cooperlake, ...); without it, an OPENBLAS_CORETYPE already set is kept, else the kernel that
# `gradflow info` says suits this CPU is taken (Debian's OpenBLAS 0.3.21 detects some current Xeons
# as Prescott, and PyTorch left alone then runs that kernel, several times slower). --blas-core
# native leaves OPENBLAS_CORETYPE unset (each program's own detection). The kernel each program
# runs is printed first, and each JSON line's blas_core is gradflow's.
# The raw JSON lines are kept in --out (default: a temporary file, named at the end).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"

usage() { sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[ $# -ge 1 ] || usage
case "$1" in -h|--help) usage ;; esac
DATA="$1"
shift
ROUNDS=3
STEPS=30
THREADS=2
DECODE_BATCH=64
REF="$ROOT/../shared/reference/torch_translator.py"
GRADFLOW="$ROOT/build/gradflow"
OUT=""
PRECISION=fp32
BLAS_CORE=""
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || { echo "bench_vs_torch: $1 needs a value" >&2; exit 2; }
  case "$1" in
    --rounds) ROUNDS="$2" ;;
    --steps) STEPS="$2" ;;
    --threads) THREADS="$2" ;;
    --decode-batch) DECODE_BATCH="$2" ;;
    --ref) REF="$2" ;;
    --gradflow) GRADFLOW="$2" ;;
    --out) OUT="$2" ;;
    --precision) PRECISION="$2" ;;
    --blas-core) BLAS_CORE="$2" ;;
    *) echo "bench_vs_torch: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
for n in "$ROUNDS" "$STEPS" "$THREADS" "$DECODE_BATCH"; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "bench_vs_torch: expected a positive integer, got '$n'" >&2; exit 2; }
done
[ -d "$DATA" ] || { echo "bench_vs_torch: data folder '$DATA' not found" >&2; exit 2; }
[ -f "$REF" ] || { echo "bench_vs_torch: reference '$REF' not found (use --ref PATH)" >&2; exit 2; }
[ -x "$GRADFLOW" ] || { echo "bench_vs_torch: '$GRADFLOW' not built (cmake --build build --target gradflow_cli)" >&2; exit 2; }
[ -n "$OUT" ] || OUT="$(mktemp /tmp/bench_vs_torch.XXXXXX.jsonl)"
: > "$OUT"

# The kernel for both programs (above): --blas-core, else OPENBLAS_CORETYPE as set, else the one
# `gradflow info` names as suiting this CPU ("openblas core: X (this CPU suits: Y)").
if [ "$BLAS_CORE" = native ]; then
  unset OPENBLAS_CORETYPE
elif [ -n "$BLAS_CORE" ]; then
  export OPENBLAS_CORETYPE="$BLAS_CORE"
elif [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  suits="$(GRADFLOW_BLAS_CORE=native "$GRADFLOW" info | sed -n 's/^openblas core: .*(this CPU suits: \([A-Za-z0-9]*\)).*/\1/p')"
  [ -n "$suits" ] || { echo "bench_vs_torch: could not read the suited OpenBLAS kernel from '$GRADFLOW info' (use --blas-core NAME)" >&2; exit 2; }
  export OPENBLAS_CORETYPE="$suits"
fi
echo "== OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-(unset: each program detects its own)}"
echo "== gradflow info"
"$GRADFLOW" info
GF_CORE="$("$GRADFLOW" info | sed -n 's/^openblas core: \([A-Za-z0-9]*\).*/\1/p')"
# PyTorch's own OpenBLAS: the library torch itself loaded (found in the process's memory map), asked
# for the kernel it runs under the same environment.
TORCH_CORE="$(/usr/bin/python3 -c '
import ctypes, torch
torch.ones(64, 64) @ torch.ones(64, 64)
libs = sorted({l.split()[-1] for l in open("/proc/self/maps") if "openblas" in l.split()[-1]})
names = []
for path in libs:
    lib = ctypes.CDLL(path)
    if hasattr(lib, "openblas_get_corename"):
        lib.openblas_get_corename.restype = ctypes.c_char_p
        names.append(lib.openblas_get_corename().decode())
print(torch.__version__, ",".join(sorted(set(names))) or "unknown (no OpenBLAS loaded by torch)")' 2>/dev/null || echo 'not importable')"
echo "== OpenBLAS kernel: gradflow ${GF_CORE:-unknown}; PyTorch ${TORCH_CORE}"
case "$TORCH_CORE" in
  "not importable") ;;
  *) [ "${TORCH_CORE#* }" = "$GF_CORE" ] || echo "== WARNING: the two programs run different OpenBLAS kernels; the ratio then compares kernels too" ;;
esac
echo "== $ROUNDS rounds: training $STEPS timed steps (after 3 warm-up steps), decoding batches of $DECODE_BATCH, $THREADS threads"

COMMON=(--data "$DATA" --threads "$THREADS")
# run IMPL MODE: one measurement, its JSON line tagged with impl and mode, appended to $OUT.
# Modes: train; decode (torch: no cache; gradflow: its KV cache); decode_cache (torch --cache);
# beam5 (gradflow only: beam search of width 5, same batches; each sentence stops at <eos> by the exact
# rule or at its own source length + 20, where greedy runs every row to the batch's longest + 20).
run() {
  local impl="$1" mode="$2" line
  local extra=(--steps "$STEPS")
  [ "$mode" != train ] && extra=(--decode-batch "$DECODE_BATCH")
  if [ "$impl" = torch ]; then
    case "$mode" in
      train) line="$(/usr/bin/python3 "$REF" bench "${COMMON[@]}" "${extra[@]}")" ;;
      decode) line="$(/usr/bin/python3 "$REF" decode "${COMMON[@]}" "${extra[@]}")" ;;
      decode_cache) line="$(/usr/bin/python3 "$REF" decode --cache "${COMMON[@]}" "${extra[@]}")" ;;
    esac
  else
    case "$mode" in
      train) line="$("$GRADFLOW" bench train --precision "$PRECISION" "${COMMON[@]}" "${extra[@]}")" ;;
      decode) line="$("$GRADFLOW" bench decode --precision "$PRECISION" "${COMMON[@]}" "${extra[@]}")" ;;
      beam5) line="$("$GRADFLOW" bench decode --beam 5 --precision "$PRECISION" "${COMMON[@]}" "${extra[@]}")" ;;
    esac
  fi
  line="$(printf '%s' "$line" | tail -n 1)"
  echo "  $impl $mode: $line"
  printf '{"impl_tag": "%s", "mode": "%s", "result": %s}\n' "$impl" "$mode" "$line" >> "$OUT"
}

for ((r = 1; r <= ROUNDS; r++)); do
  echo "== round $r"
  if ((r % 2)); then order=(torch gradflow); else order=(gradflow torch); fi
  for mode in train decode; do
    for impl in "${order[@]}"; do run "$impl" "$mode"; done
  done
  run torch decode_cache
  run gradflow beam5
done

echo "== medians over $ROUNDS rounds (raw lines: $OUT)"
/usr/bin/python3 - "$OUT" <<'EOF'
import json, statistics, sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def median(impl, mode, key):
    v = [r["result"][key] for r in rows if r["impl_tag"] == impl and r["mode"] == mode]
    return statistics.median(v) if v else float("nan")

metrics = [("train", "tgt_tokens_per_s", "training target tokens/s"),
           ("train", "src_tokens_per_s", "training source tokens/s"),
           ("train", "peak_rss_mib", "training peak RSS MiB"),
           ("decode", "sentences_per_s", "decoding sentences/s"),
           ("decode", "tokens_per_s", "decoding tokens/s"),
           ("decode", "peak_rss_mib", "decoding peak RSS MiB")]
print(f"{'metric':<34}{'PyTorch':>12}{'gradflow':>12}{'gradflow/PyTorch':>18}")
for mode, key, name in metrics:
    t, g = median("torch", mode, key), median("gradflow", mode, key)
    ratio = g / t if t else float("nan")
    print(f"{name:<34}{t:>12.1f}{g:>12.1f}{ratio:>18.2f}")
# The cached PyTorch decoder and gradflow's beam search.
tc, g = median("torch", "decode_cache", "sentences_per_s"), median("gradflow", "decode", "sentences_per_s")
print(f"{'decoding sentences/s, torch --cache':<34}{tc:>12.1f}{g:>12.1f}{g / tc:>18.2f}")
b5 = median("gradflow", "beam5", "sentences_per_s")
print(f"gradflow beam 5: {b5:.1f} sentences/s = {b5 / g:.2f} x its greedy")
# mfu: the model's GEMM FLOPs per second over the sgemm peak, both timed inside gradflow's bench.
# The reference runs the same shapes, so its FLOPs per target token are taken as gradflow's.
gf_flops_per_token = median("gradflow", "train", "model_gflops_per_s") / median("gradflow", "train", "tgt_tokens_per_s")
peak = median("gradflow", "train", "sgemm_peak_gflops_per_s")
t_mfu = gf_flops_per_token * median("torch", "train", "tgt_tokens_per_s") / peak
print(f"mfu (model GEMM GFLOP/s / sgemm peak {peak:.1f} GFLOP/s): PyTorch {t_mfu:.3f} (estimated from the same FLOPs per token), "
      f"gradflow {median('gradflow', 'train', 'mfu'):.3f}")
EOF
