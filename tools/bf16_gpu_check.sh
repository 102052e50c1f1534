#!/usr/bin/env bash
# One time-boxed GPU session for the BF16 tensor-core convolutions: build the benchmark and the ops
# tests, count HMMA / local-memory instructions in the kernels' SASS, run the bf16 tests, then
# cnn-bf16-conv-bench. Logs and the CSV go to $OUT (default ./gpu-out); the summary is printed last.
# Usage: tools/bf16_gpu_check.sh [BUILD_DIR]   (repository root, GPU machine; BF16_BENCH_SECONDS=150)
set -uo pipefail
out="${OUT:-gpu-out}"; mkdir -p "$out"; b="${1:-build-gpu}"; secs="${BF16_BENCH_SECONDS:-150}"
echo "== build ($(date +%T))"
{ cmake -S . -B "$b" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DCNN_WITH_OPENCV=OFF &&
  cmake --build "$b" -j16 --target cnn-bf16-conv-bench test_ops; } > "$out/bf16_build.log" 2>&1 ||
  { grep -E "error|FAILED" "$out/bf16_build.log" | head -40; exit 1; }
echo "== sass ($(date +%T))"
obj=$(find "$b" -name 'conv2d_igemm_bf16_cuda.cu.o' | head -1)
cuobj=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
if [ -x "$cuobj" ] && [ -n "$obj" ]; then
  sass=/tmp/igemm_sass.txt; "$cuobj" --dump-sass "$obj" > "$sass" 2>&1
  echo "conv2d_igemm_bf16_cuda.cu.o: $(grep -c HMMA "$sass") HMMA, $(grep -c LDSM "$sass") LDSM," \
    "$(grep -c LDGSTS "$sass") LDGSTS, $(grep -cE "\\b(LDL|STL)\\b" "$sass") LDL/STL"
else
  echo "no cuobjdump or object: SASS not checked"
fi
echo "== bf16 tests ($(date +%T))"
timeout 180 "$b/tests/test_ops" "*bf16*" > "$out/bf16_tests.log" 2>&1; rc=$?
echo "test_ops *bf16*: rc $rc: $(grep -E '^(test cases|All tests)' "$out/bf16_tests.log" | tail -1)"
[ $rc -ne 0 ] && grep -B4 -A14 "FAILED" "$out/bf16_tests.log" | head -60
echo "== cnn-bf16-conv-bench --seconds $secs ($(date +%T))"
timeout $((secs + 90)) "$b/tools/cnn-bf16-conv-bench" --seconds "$secs" --csv "$out/bf16.csv" > "$out/bf16_bench.log" 2>&1
rc=$?
sed -n '/^== summary/,$p' "$out/bf16_bench.log" | head -70
[ $rc -ne 0 ] && tail -5 "$out/bf16_bench.log"
echo "bench rc $rc ($(date +%T))"
