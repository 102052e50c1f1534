// The GPU's measured FP32 peak and DRAM bandwidth, the roofline that `cnn-bench conv` reports each
// implementation against (a datasheet figure assumes boost clocks the card may not hold).
// Trap: these are best-of-several measurements of synthetic kernels (an FMA chain, a copy), so
// they are upper bounds a real convolution approaches, not what it should be expected to reach.
#pragma once

#include "core/exec_context.h"

namespace cnn {

struct PeakFigures {
  double fp32_tflops = 0;    // fused multiply-adds counted as 2 FLOPs
  double dram_gb_per_s = 0;  // bytes read + bytes written, 1 GB = 1e9 bytes
};

// Runs on ctx's device and stream for well under a second; throws where there is no CUDA device
// (peak_nocuda.cpp in a build without CUDA).
PeakFigures measure_peak(const ExecContext& ctx);

}  // namespace cnn
