#!/usr/bin/env bash
# Sweeps the card profile's launch choices (src/driver/card.rs) on one GPU, one line per variant.
#
#   CUDASEM_DRIVER=cuda bench/sweep_card.sh [BINARY] [OUT_DIR]     # from the repository root
#
# BINARY: the release `cudasem` (default .gpu/bin/bin-cudasem, else target/release/cudasem).
# Each variant is one CUDASEM_BENCH_TUNING value (`key=value` items: heavy_vectors, sum_blocks, sum_loads,
# ew_threads, norm_blocks, norm_threads, heavy_unroll, mid_vectors, early_waves, gemv_rows, norm_early; the first
# three integers EW_WAVES,VECTORS,REDUCE_WAVES). PyTorch runs once per part, in the `default` line (the card's
# own choices); the other lines are cudasem alone, their ratio against that PyTorch time (copy_d2d in every ops
# line shows the machine's drift). Lines:
#   ops  VARIANT  case=cudasem_us/ratio ...    (ratio = PyTorch µs / cudasem µs: > 1 is faster)
#   gemv VARIANT  case=cudasem_us/ratio ...    (the row-vector products, as ops)
#   sum  VARIANT  sum_f32_1gib=GB/s/ratio      (ratio = cudasem GB/s / PyTorch GB/s)
#   norm VARIANT  layer_norm_…=ms/ratio ...    (ratio = PyTorch ms / cudasem ms)
# PARTS (environment): the parts to run, of `ops gemv sum norm` (all by default).
set -euo pipefail
unset CUDASEM_BENCH_TUNING
BIN=${1:-.gpu/bin/bin-cudasem}
[ -x "$BIN" ] || BIN=target/release/cudasem
OUT=${2:-${OUT:-/tmp}/sweep_card}
mkdir -p "$OUT"
export CUDASEM_DRIVER=${CUDASEM_DRIVER:-cuda}
PARTS=${PARTS:-ops gemv sum norm}
CASES=sin_f16,sin_bf16,cos_f16,cos_bf16,tanh_f16,pow_f32,neg_f16,relu_f16,add_bf16,mul_bf16_scalar
GEMV_CASES=matmul_f32_vec,matmul_bf16_vec,matmul_f16_vec

"$BIN" info | grep -E "^  cuda:0|launch profile" | head -2 || true

# line PART VARIANT JSON BASE: one line from a run's JSON (BASE: the run with PyTorch's figures).
line() {
  python3 - "$@" <<'EOF'
import json, sys
part, name, path, base = sys.argv[1:5]
run, ref = json.load(open(path)), json.load(open(base))
if part in ("ops", "gemv"):
    theirs = {c["name"]: c["pytorch_us"] for c in ref["cases"]}
    cells = [f'{c["name"]}={c["cudasem_us"]:.2f}/{(theirs.get(c["name"]) or 0) / c["cudasem_us"]:.3f}'
             for c in run["cases"] if c.get("cudasem_us")]
else:
    # Figure rows: the ratio is > 1 where cudasem is better (times: PyTorch's over ours; rates: ours
    # over PyTorch's), as the row's `lower_is_better` says.
    theirs = {r["name"]: r["pytorch"] or 0 for r in ref["results"]}
    def ratio(r):
        t = theirs.get(r["name"], 0)
        return t / r["cudasem"] if r["lower_is_better"] else (r["cudasem"] / t if t else 0)
    cells = [f'{r["name"]}={r["cudasem"]:.4g}/{ratio(r):.3f}' for r in run["results"] if r.get("cudasem")]
print(f"{part:4} {name:28} " + " ".join(cells), flush=True)
EOF
}

# run PART VARIANT TUNING: one variant of a part (ops or sum).
run() {
  local part=$1 name=$2 tuning=$3 json="$OUT/$1_$2.json" extra=(--no-pytorch)
  [ "$name" = default ] && extra=()
  case $part in
    ops) set -- bench --ops --only "$CASES" ;;
    gemv) set -- bench --ops --only "$GEMV_CASES" ;;
    norm) set -- bench --only norms ;;
    *) set -- bench --only sum_f32_1gib ;;
  esac
  if [ -n "$tuning" ]; then export CUDASEM_BENCH_TUNING=$tuning; else unset CUDASEM_BENCH_TUNING; fi
  "$BIN" "$@" "${extra[@]}" --json "$json" >"$OUT/${part}_$name.log" 2>&1 ||
    { echo "$part $name failed: see $OUT/${part}_$name.log"; return 0; }
  line "$part" "$name" "$json" "$OUT/${part}_default.json"
}

part() { [[ " $PARTS " == *" $1 "* ]]; }
if part ops; then
  run ops default ""
  # heavy_vectors: bf16 sin / cos; mid_vectors: the other heavy functions (f16 sin / cos / tanh, f32 pow).
  for v in 1 2 4 8; do run ops "heavy_vectors=$v" "heavy_vectors=$v"; done
  for v in 1 2 4; do run ops "mid_vectors=$v" "mid_vectors=$v"; done
  for v in 1 2 4; do run ops "all_vectors=$v" "256,$v,1"; done
  for t in 64 128 256; do run ops "ew_threads=$t" "ew_threads=$t"; done
  # The heavy functions one vector at a time (0: 32 registers a thread for bf16 sin, against 44) or two.
  for v in heavy_unroll=0 heavy_unroll=1 heavy_unroll=0,ew_threads=128 heavy_unroll=0,heavy_vectors=4,mid_vectors=4 \
    heavy_unroll=1,heavy_vectors=4,mid_vectors=4; do
    run ops "$v" "$v"
  done
  # The fast elementwise kernel launched early (programmatic serialization) from N waves of blocks.
  for w in 0 1 2 4 8; do run ops "early_waves=$w" "early_waves=$w"; done
fi
if part gemv; then
  run gemv default ""
  # 1: f32 weights through gv_rows (else cuBLASLt); 2: gv_rows launched early; 4: gv_rows8, eight
  # rows a lane in flight; their sums.
  for g in 0 1 2 3 4 5 6 7; do run gemv "gemv_rows=$g" "gemv_rows=$g"; done
fi
if part sum; then
  run sum default ""
  for b in 1 2 4 8 16 32; do
    for l in 4 8; do run sum "sum_blocks=$b,sum_loads=$l" "sum_blocks=$b,sum_loads=$l"; done
  done
  run sum "sum_loads=4" "sum_loads=4"
fi
if part norm; then
  run norm default ""
  # (Blocks of 64 hold a row of 4,096 bf16 in no vector kernel: 0.19-0.42 x on the H100, session 32.)
  for v in norm_blocks=0 norm_blocks=0,norm_threads=128 norm_blocks=16 norm_threads=128 \
    norm_blocks=16,norm_threads=128 norm_blocks=2 norm_blocks=3 norm_blocks=4 norm_blocks=6; do
    run norm "$v" "$v"
  done
  # Launched plainly (the card's own launches them early), on its grid and on a block a row.
  for v in norm_early=0 norm_early=0,norm_blocks=0 norm_early=0,norm_blocks=0,norm_threads=128; do
    run norm "$v" "$v"
  done
fi
