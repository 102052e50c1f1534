// Stand-ins for the kernels of probe_operands.h where probe_operands_cuda.cu is not built (a
// CPU-only build): each throws, so a CUDA context fails loudly, never silently.
#include "core/error.h"
#include "tune/probe_operands.h"

namespace cnn {

void probe_fill_cuda(const ExecContext&, void*, DType, int64_t, int64_t, int64_t, const ProbeFill&) {
  CNN_THROW("probe_fill_cuda called but this build has no CUDA kernels for it");
}

L2Sums l2_sums_cuda(const ExecContext&, const float*, const float*, int64_t) {
  CNN_THROW("l2_sums_cuda called but this build has no CUDA kernels for it");
}

void probe_poison_cuda(const ExecContext&, void*, size_t) {
  CNN_THROW("probe_poison_cuda called but this build has no CUDA kernels for it");
}

}  // namespace cnn
