#!/usr/bin/env bash
# One GPU-machine session: CUDA build, every [gpu] test, cnn-bench on the bundled models, a GPU
# training run and the PyTorch comparison, each time-boxed. Full logs go to $LOGS (default
# /tmp/gpu-logs); a few summary files go to $OUT (default ./gpu-out), since only a few come back.
# Usage: tools/gpu_check.sh [BUILD_DIR]   (from the repository root, on a machine with a GPU)
set -uo pipefail
out="${OUT:-gpu-out}"; logs="${LOGS:-/tmp/gpu-logs}"; mkdir -p "$out" "$logs"; b="${1:-build-gpu}"
sum="$out/summary.txt"
step() { echo "== $1 ($(date +%T))" | tee -a "$sum"; }
step "gpu"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$sum"
step "build"
cmake -S . -B "$b" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DCNN_WITH_OPENCV=OFF \
  > "$logs/configure.log" 2>&1 || { tail -30 "$logs/configure.log" | tee -a "$sum"; exit 1; }
cmake --build "$b" -j16 > "$logs/build.log" 2>&1 || { grep -E "error|FAILED" "$logs/build.log" | head -40 | tee -a "$sum"; exit 1; }
step "gpu tests"
for t in "$b"/tests/test_*; do
  case "$t" in *.cmake) continue ;; esac
  [ -x "$t" ] || continue
  n=$(basename "$t"); timeout 240 "$t" "[gpu]" > "$logs/$n.gpu.log" 2>&1; rc=$?
  echo "$n: rc $rc $(grep -E '^(test cases|All tests)' "$logs/$n.gpu.log" | tail -1)" | tee -a "$sum"
  [ $rc -ne 0 ] && grep -B3 -A12 "FAILED" "$logs/$n.gpu.log" | head -150 >> "$out/gpu_test_failures.txt"
done
step "cnn-bench"
bench() { timeout 60 "$b/app/cnn-bench" --quiet model "models/$1.yaml" --device cuda --batch "$2" --steps 20 \
  --repeats 5 ${3:-} 2>&1 | tee -a "$out/bench.txt" | head -3 | tee -a "$sum"; }
bench mini_xception 32; bench mini_xception 256; bench fer_cnn 64; bench fashion_cnn 256; bench vgg_fer 64 --layers
step "gpu training: fashion_cnn 5 epochs"
s0=$(date +%s%N); timeout 120 "$b/app/cnn-train" models/fashion_cnn.yaml --device cuda --quiet \
  --out "$logs/run-fashion" --overwrite > "$logs/train_fashion.txt" 2>&1; rc=$?
echo "rc $rc, wall $(( ($(date +%s%N) - s0) / 1000000 )) ms" | tee -a "$sum"; grep -E "accuracy|error" "$logs/train_fashion.txt" | tee -a "$sum"
cp "$logs/run-fashion/metrics.jsonl" "$out/metrics_fashion.jsonl" 2>/dev/null
step "pytorch comparison"
for m in "mini_xception --batch 32 --batch 256" "vgg_fer --batch 64" "fer_cnn --batch 64"; do
  set -- $m; timeout 120 python3 tools/compare_pytorch.py "models/$1.yaml" "${@:2}" --cnn-bench "$b/app/cnn-bench" \
    --json "$out/compare_$1.json" > "$logs/compare_$1.txt" 2>&1; echo "compare $1: rc $?" | tee -a "$sum"
  tail -14 "$logs/compare_$1.txt" | tee -a "$sum"
done
step "done"
