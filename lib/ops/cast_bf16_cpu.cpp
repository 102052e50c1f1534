// FP32 <-> BF16 conversion on the CPU, element by element through core/bf16.h (OpenMP-threaded).
#include "ops/cast_bf16.h"

namespace cnn {

void cast_float_to_bf16_cpu(const ExecContext& ctx, int64_t n, const float* x, bf16* y) {
#pragma omp parallel for num_threads(ctx.threads()) schedule(static) if (n > (int64_t{1} << 16))
  for (int64_t i = 0; i < n; ++i) y[i] = to_bf16(x[i]);
}

void cast_bf16_to_float_cpu(const ExecContext& ctx, int64_t n, const bf16* x, float* y) {
#pragma omp parallel for num_threads(ctx.threads()) schedule(static) if (n > (int64_t{1} << 16))
  for (int64_t i = 0; i < n; ++i) y[i] = to_float(x[i]);
}

}  // namespace cnn
