#!/usr/bin/env bash
# The tf32 slice of issue 18 on a GPU machine, time-boxed: a CUDA build of what it needs, the
# tf32 [gpu] tests (the op harness's [gpu] cases too, which check every cuda f32cl row, tf32's
# channels-last activations, against the CPU), the accuracy probe's TF32 errors per cuDNN
# algorithm (what kTf32AccuracyTolerance in lib/tune/accuracy_tolerance.h must admit), ours in
# fp32 and in tf32 under both activation layouts (train.tf32_layout nchw and nhwc) on issue 18's
# four benchmark rows, then (unless --no-pytorch) tools/compare_pytorch.py --precision tf32 on the
# same rows with our side in layout $TF32_LAYOUT (default nhwc). Summary and logs go to $OUT
# (default ./tf32-out).
# Usage: tools/tf32_gpu_check.sh [BUILD_DIR] [--no-pytorch]   (from the repository root)
set -uo pipefail
out="${OUT:-tf32-out}"; mkdir -p "$out"; b="${1:-build-gpu}"; pytorch="${2:-}"; sum="$out/summary.txt"
# (the loops below reuse the positional parameters: the arguments are read here, once)
step() { echo "== $1 ($(date +%T))" | tee -a "$sum"; }
rows=("mini_xception 32" "mini_xception 256" "vgg_fer 64" "vgg_fer 640")

step "build"
cmake -S . -B "$b" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DCNN_WITH_OPENCV=OFF \
  -DCNN_WITH_MPI=OFF > "$out/configure.log" 2>&1 || { tail -30 "$out/configure.log" | tee -a "$sum"; exit 1; }
cmake --build "$b" -j"$(nproc)" --target test_ops test_train cnn-bench > "$out/build.log" 2>&1 ||
  { grep -E "error|FAILED" "$out/build.log" | head -40 | tee -a "$sum"; exit 1; }

step "tf32 gpu tests"
for t in "test_ops|*tf32*" "test_ops|backend ops*" "test_train|tf32*"; do
  IFS='|' read -r suite spec <<< "$t"; set -- "$suite" "$spec"
  log="$out/$1_${2//[^a-z0-9]/_}.log"
  timeout 300 "$b/tests/$1" "$2" > "$log" 2>&1
  echo "$1 '$2': rc $? $(grep -E '^(test cases|All tests)' "$log" | tail -1)" | tee -a "$sum"
  grep -B2 -A14 "FAILED" "$log" | head -80 >> "$sum"
done

step "probe errors of the cuDNN algorithms under tf32 (vgg_fer and mini_xception layers)"
timeout 300 "$b/app/cnn-bench" --quiet conv --model models/vgg_fer.yaml --model models/mini_xception.yaml \
  --device cuda --precision tf32 --impl 'cudnn*' --repeats 2 --warmup 1 --csv "$out/conv_tf32.csv" \
  > "$out/conv_tf32.txt" 2>&1; echo "rc $?" | tee -a "$sum"
# Worst rel_err per math and direction over every ok row (columns: status 10, precision 11, rel_err 21).
awk -F, 'NR > 1 && $10 == "ok" && $21 != "" { k = $11 " " $4; if ($21 + 0 > w[k]) { w[k] = $21 + 0; a[k] = $3 " " $2 } }
  END { for (k in w) printf "worst %s: %.3g (%s)\n", k, w[k], a[k] }' "$out/conv_tf32.csv" | sort | tee -a "$sum"

step "ours: fp32 against tf32 NCHW and tf32 channels-last (img/s)"
for r in "${rows[@]}"; do
  set -- $r
  for pl in "fp32 nchw" "tf32 nchw" "tf32 nhwc"; do
    read -r p layout <<< "$pl"; tag="${p}_$layout"
    timeout 180 "$b/app/cnn-bench" --quiet model "models/$1.yaml" --device cuda --batch "$2" --precision "$p" \
      --set "train.tf32_layout=$layout" --breakdown --json "$out/bench_$1_$2_$tag.json" > "$out/bench_$1_$2_$tag.txt" 2>&1
    echo "rc $? $tag $(head -1 "$out/bench_$1_$2_$tag.txt")" | tee -a "$sum"
    grep -E "^activations:" "$out/bench_$1_$2_$tag.txt" | tee -a "$sum"
  done
done

if [ "$pytorch" != "--no-pytorch" ]; then
  step "PyTorch's TF32 beside ours"
  for m in "mini_xception --batch 32 --batch 256" "vgg_fer --batch 64 --batch 640"; do
    set -- $m
    timeout 600 python3 tools/compare_pytorch.py "models/$1.yaml" "${@:2}" --precision tf32 --no-check \
      --set "train.tf32_layout=${TF32_LAYOUT:-nhwc}" \
      --cnn-bench "$b/app/cnn-bench" --json "$out/compare_tf32_$1.json" > "$out/compare_tf32_$1.txt" 2>&1
    echo "compare $1: rc $?" | tee -a "$sum"; tail -6 "$out/compare_tf32_$1.txt" | tee -a "$sum"
  done
fi
step "done"
