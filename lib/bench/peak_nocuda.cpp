// Stand-in for peak_cuda.cu in a build without CUDA: there is no GPU peak to measure.
#include "bench/peak.h"
#include "core/error.h"

namespace cnn {

PeakFigures measure_peak(const ExecContext& ctx) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "measure_peak");
}

}  // namespace cnn
