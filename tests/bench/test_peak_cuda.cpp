// measure_peak (bench/peak.h) on the GPU: both figures positive and below anything a single GPU
// reaches (1000 TFLOP/s FP32, 100 TB/s), and the FMA kernel not optimised away (which would show
// as an absurd TFLOP/s figure).
#include <fmt/format.h>

#include "bench/peak.h"
#include "core/cuda_context.h"
#include "support/catch.h"

using namespace cnn;

TEST_CASE("measure peak reports a plausible fp32 rate and dram bandwidth", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const PeakFigures f = measure_peak(cuda.ctx());
  INFO(fmt::format("fp32 {:.1f} TFLOP/s, dram {:.0f} GB/s", f.fp32_tflops, f.dram_gb_per_s));
  CHECK(f.fp32_tflops > 0.5);
  CHECK(f.fp32_tflops < 1000.0);
  CHECK(f.dram_gb_per_s > 50.0);
  CHECK(f.dram_gb_per_s < 100000.0);
  WARN(fmt::format("measured peak: fp32 {:.1f} TFLOP/s, dram {:.0f} GB/s", f.fp32_tflops, f.dram_gb_per_s));
}

TEST_CASE("measure peak refuses a cpu context", "[gpu]") {
  CNN_REQUIRE_GPU();
  CHECK_THROWS(measure_peak(ExecContext::cpu(1)));
}
