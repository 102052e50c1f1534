#!/usr/bin/env bash
# One time-boxed GPU session for the BF16 tensor-core convolutions (NCHW and NHWC): build the
# benchmark and the ops tests, count HMMA / LDSM / LDGSTS / local-memory instructions in the
# kernels' SASS, run the bf16 tests, then cnn-bf16-conv-bench. Logs and the CSV go to $OUT
# (default ./gpu-out); the summary is printed last.
# Usage: tools/bf16_gpu_check.sh [BUILD_DIR]   (repository root, GPU machine)
#   BF16_BENCH_SECONDS=150  stop starting layers after this many seconds
#   BF16_BENCH_ARGS="..."   more cnn-bf16-conv-bench options (--no-nchw, --filter vgg_fer/640, ...)
#   BF16_TESTS="*bf16*"     the Catch2 filter of the tests to run ("" skips them)
#   BF16_SASS=0             skip the SASS counts
set -uo pipefail
out="${OUT:-gpu-out}"; mkdir -p "$out"; b="${1:-build-gpu}"; secs="${BF16_BENCH_SECONDS:-150}"
tests="${BF16_TESTS-*bf16*}"
echo "== build ($(date +%T))"
{ cmake -S . -B "$b" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DCNN_WITH_OPENCV=OFF &&
  cmake --build "$b" -j16 --target cnn-bf16-conv-bench test_ops; } > "$out/bf16_build.log" 2>&1 ||
  { grep -E "error|FAILED" "$out/bf16_build.log" | head -40; exit 1; }
[ "${BF16_SASS:-1}" = 0 ] || echo "== sass ($(date +%T))"
cuobj=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
for stem in conv2d_igemm_bf16_cuda conv2d_igemm_nhwc_bf16_cuda conv2d_igemm_nhwc_bf16_filter_cuda \
            conv2d_igemm_nhwc_bf16_wgmma_sm90a conv2d_direct_nhwc_bf16_cuda; do
  [ "${BF16_SASS:-1}" = 0 ] && break
  obj=$(find "$b" -name "$stem.cu.o" | head -1)
  if [ -x "$cuobj" ] && [ -n "$obj" ]; then
    sass=/tmp/$stem.sass; "$cuobj" --dump-sass "$obj" > "$sass" 2>&1
    echo "$stem: $(grep -c HMMA "$sass") HMMA, $(grep -c HGMMA "$sass") HGMMA, $(grep -c LDSM "$sass") LDSM," \
      "$(grep -c LDGSTS "$sass") LDGSTS, $(grep -c "WARPGROUP.ARRIVE\|WARPSYNC" "$sass") arrive/warpsync," \
      "$(grep -cE "\\b(LDL|STL)\\b" "$sass") LDL/STL"
  else
    echo "$stem: no cuobjdump or object, SASS not checked"
  fi
done
if [ -n "$tests" ]; then
  echo "== tests $tests ($(date +%T))"
  timeout 240 "$b/tests/test_ops" "$tests" > "$out/bf16_tests.log" 2>&1; rc=$?
  echo "test_ops $tests: rc $rc: $(grep -E '^(test cases|All tests)' "$out/bf16_tests.log" | tail -1)"
  [ $rc -ne 0 ] && grep -B4 -A14 "FAILED" "$out/bf16_tests.log" | head -80
fi
echo "== cnn-bf16-conv-bench --seconds $secs ${BF16_BENCH_ARGS:-} ($(date +%T))"
# shellcheck disable=SC2086
timeout $((secs + 90)) "$b/tools/cnn-bf16-conv-bench" --seconds "$secs" --csv "$out/bf16.csv" \
  --plans-csv "$out/plans.csv" ${BF16_BENCH_ARGS:-} \
  > "$out/bf16_bench.log" 2>&1
rc=$?
sed -n '/^== summary/,$p' "$out/bf16_bench.log" | head -80
[ $rc -ne 0 ] && tail -5 "$out/bf16_bench.log"
echo "bench rc $rc ($(date +%T))"
