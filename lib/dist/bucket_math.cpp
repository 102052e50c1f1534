// CPU side of bucket_math.h and the device dispatch.
#include "dist/bucket_math.h"

namespace cnn {

void scale_buffer(const ExecContext& ctx, float* x, int64_t n, float factor) {
  if (ctx.device == Device::cuda) return scale_buffer_cuda(ctx.cuda_stream, x, n, factor);
  for (int64_t i = 0; i < n; ++i) x[i] *= factor;
}

void divide_buffer(const ExecContext& ctx, float* x, int64_t n, float divisor) {
  if (ctx.device == Device::cuda) return divide_buffer_cuda(ctx.cuda_stream, x, n, divisor);
  for (int64_t i = 0; i < n; ++i) x[i] /= divisor;
}

void pack_bf16_host(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = float_to_bf16(x[i]);
}

void unpack_bf16_divide_host(const uint16_t* x, float* y, int64_t n, float divisor) {
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_float(x[i]) / divisor;
}

}  // namespace cnn
