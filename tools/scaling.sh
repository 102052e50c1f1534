#!/usr/bin/env bash
# Weak scaling of data-parallel training: cnn-train under mpirun at 1, 2, 4, 8 GPUs (those this
# machine has) with a fixed per-GPU batch, next to PyTorch DDP on the same models
# (tools/compare_pytorch.py --ddp), and the 1-rank cost of the data-parallel path
# (`mpirun -np 1 cnn-train` against plain `cnn-train`).
#
#   tools/scaling.sh [--gpus "1 2 4 8"] [--models "vgg_fer fer_cnn mini_xception"] [--batch B]
#                    [--steps S] [--build DIR] [--out DIR] [--no-pytorch]
#
# Ours: real training runs on synthetic data (data.format: synthetic, GPU-resident), 2 epochs of
# S steps per rank; the figure is epoch 2's img_per_s from metrics.jsonl (epoch 1 holds the
# autotuning and warm-up), and its allreduce_exposed_ms (mean per step: the time the optimizer
# waited for gradient buckets after backward ended; replayed CUDA-graph steps record no timing
# events, so at 2+ GPUs it comes from the same run with --no-cuda-graph). train.lr_scaling none, so every world size runs the
# same arithmetic. PyTorch: DDP eager, per-GPU batch B, CUDA-event timed steps on synthetic data.
# Writes OUT/scaling.csv, OUT/scaling.md (the table for bench/RESULTS.md) and each run's logs.
set -euo pipefail

gpus_wanted="1 2 4 8"
models="vgg_fer fer_cnn mini_xception"
batch=64
steps=150
build=build
out=scaling-out
pytorch=1
while [ $# -gt 0 ]; do
  case "$1" in
    --gpus) gpus_wanted="$2"; shift 2 ;;
    --models) models="$2"; shift 2 ;;
    --batch) batch="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --no-pytorch) pytorch=0; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "scaling.sh: error: unknown option $1" >&2; exit 2 ;;
  esac
done

have=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
[ "$have" -ge 1 ] || { echo "scaling.sh: error: no GPU visible (nvidia-smi -L)" >&2; exit 1; }
gpus=""
for n in $gpus_wanted; do
  if [ "$n" -le "$have" ]; then gpus="$gpus $n"; else echo "scaling.sh: skipping $n GPUs: this machine has $have"; fi
done
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
csv="$out/scaling.csv"
echo "model,gpus,launcher,batch_per_gpu,ours_img_s,ours_efficiency,allreduce_exposed_ms,ddp_img_s,ddp_efficiency,ours_over_ddp" >"$csv"

# epoch 2's img_per_s and allreduce_exposed_ms of a run directory
epoch2() {
  python3 - "$1" <<'EOF'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl") if l.strip()]
ep = [l for l in lines if l.get("event") == "epoch"]
e = ep[-1]
print(f"{e['img_per_s']:.1f} {e.get('allreduce_exposed_ms', 'nan')}")
EOF
}

run_ours() {  # model gpus launcher(mpirun|plain|uncaptured) -> "img_s exposed_ms"
  local m=$1 n=$2 how=$3 dir="$out/run-$1-$2-$3"
  local args=("models/$m.yaml" --device cuda --batch "$batch" --epochs 2 --quiet --out "$dir"
              --set data.format=synthetic --set "data.synthetic_size=$((n * batch * steps))"
              --set train.lr_scaling=none --set train.checkpoint.every_epochs=0)
  rm -rf "$dir"
  [ "$how" = uncaptured ] && args+=(--no-cuda-graph)
  if [ "$how" = plain ]; then
    "$build/app/cnn-train" "${args[@]}" >"$dir.log" 2>&1
  else
    mpirun -np "$n" --bind-to none --oversubscribe "$build/app/cnn-train" "${args[@]}" >"$dir.log" 2>&1
  fi || { echo "scaling.sh: $m on $n GPU(s) ($how) failed; see $dir.log" >&2; tail -5 "$dir.log" >&2; echo "nan nan"; return; }
  epoch2 "$dir"
}

run_ddp() {  # model gpus -> img_s
  [ "$pytorch" = 1 ] || { echo nan; return; }
  local j="$out/ddp-$1-$2.json"
  python3 tools/compare_pytorch.py "models/$1.yaml" --ddp "$2" --batch "$batch" --json "$j" >"$out/ddp-$1-$2.log" 2>&1 \
    || { echo "scaling.sh: DDP $1 on $2 GPU(s) failed; see $out/ddp-$1-$2.log" >&2; echo nan; return; }
  python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['img_per_s'])" "$j"
}

ratio() { python3 -c "import sys,math; a,b=map(float,sys.argv[1:]); print('nan' if math.isnan(a) or math.isnan(b) or b==0 else f'{a/b:.3f}')" "$@"; }

for m in $models; do
  read -r plain _ < <(run_ours "$m" 1 plain)
  echo "$m,1,plain,$batch,$plain,,,,," >>"$csv"
  base=""; ddp_base=""
  for n in $gpus; do
    read -r ours exposed < <(run_ours "$m" "$n" mpirun)
    # A replayed CUDA graph records no timing events: the exposed all-reduce time comes from the
    # same run uncaptured (same kernels, same bucket overlap).
    if [ "$n" -gt 1 ] && [ "$exposed" = nan ]; then read -r _ exposed < <(run_ours "$m" "$n" uncaptured); fi
    ddp=$(run_ddp "$m" "$n")
    [ -n "$base" ] || base=$ours
    [ -n "$ddp_base" ] || ddp_base=$ddp
    eff=$(ratio "$ours" "$(python3 -c "import sys; print(float(sys.argv[1]) * int(sys.argv[2]))" "$base" "$n")")
    deff=$(ratio "$ddp" "$(python3 -c "import sys; print(float(sys.argv[1]) * int(sys.argv[2]))" "$ddp_base" "$n")")
    echo "$m,$n,mpirun,$batch,$ours,$eff,$exposed,$ddp,$deff,$(ratio "$ours" "$ddp")" >>"$csv"
    echo "$m $n GPU(s): ours $ours img/s (efficiency $eff, exposed all-reduce $exposed ms/step), DDP $ddp img/s"
  done
  one=$(grep "^$m,1,mpirun" "$csv" | cut -d, -f5); one=${one:-nan}
  echo "$m 1 GPU: mpirun -np 1 over plain = $(ratio "$one" "$plain")"
done

python3 - "$csv" >"$out/scaling.md" <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
print("| model | GPUs | launcher | batch/GPU | ours img/s | efficiency | exposed all-reduce ms/step | DDP img/s | DDP efficiency | ours/DDP |")
print("|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    f = lambda k, fmt="{:,.0f}": (fmt.format(float(r[k])) if r[k] not in ("", "nan") else "-")
    print(f"| {r['model']} | {r['gpus']} | {r['launcher']} | {r['batch_per_gpu']} | {f('ours_img_s')} | "
          f"{f('ours_efficiency', '{:.3f}')} | {f('allreduce_exposed_ms', '{:.3f}')} | {f('ddp_img_s')} | "
          f"{f('ddp_efficiency', '{:.3f}')} | {f('ours_over_ddp', '{:.2f}')} |")
EOF
cat "$out/scaling.md"
