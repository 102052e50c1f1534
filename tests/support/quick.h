// CNN_TEST_QUICK=1 (unset or 0: off): the heavy GPU cases sized for instrumented runs
// (tools/gpu_sanitize.sh sets it for every compute-sanitizer tool, under which they outlasted any
// time box). Each case that reads it says so; every one keeps every assertion and runs the same
// code paths on less work:
//   - test_ops "conv2d cuda benchmark on the vgg_fer layers" (hidden, [gpu]): 1 warm-up and 1 timed
//     run per timing, not 3 and 20, at batch 2, not 64 (every layer and strategy kept);
//   - test_tune's "autotune on the gpu excludes only inaccurate algorithms ...": 0 warm-ups and 1 timed
//     run per candidate (not 2 and 5; AutotuneOptions' least), batch 8 (not 32: the candidates are
//     those batch 8 admits, each run, probed and judged as before);
//   - test_app: the cuda graph and the 16-bit GPU-resident metric comparisons 2 epochs, not 3 (the
//     first still captures, the second replays); the two NCCL data-parallel cases 41 synthetic
//     images, not 97 (full batches and a short one as before), the two-rank one's hang timeout 600 s
//     (not 120 s: its ranks run under the tool too).
// Trap: a time printed under it is one sample, not a median: no figure from it is a measurement.
#pragma once

#include <cstdlib>

namespace cnn::test {

inline bool quick() {
  static const bool on = [] {
    const char* v = std::getenv("CNN_TEST_QUICK");
    return v && std::atoi(v) != 0;
  }();
  return on;
}

}  // namespace cnn::test
