// Stand-ins for bucket_math_cuda.cu in a build without CUDA: a CUDA context can't exist there, so
// reaching one of these is a bug; each throws rather than doing nothing.
#include "core/error.h"
#include "dist/bucket_math.h"

namespace cnn {

[[noreturn]] static void no_cuda(const char* fn) { CNN_THROW("{} called but this build has no CUDA", fn); }

void scale_buffer_cuda(void*, float*, int64_t, float) { no_cuda("scale_buffer_cuda"); }
void divide_buffer_cuda(void*, float*, int64_t, float) { no_cuda("divide_buffer_cuda"); }
void pack_bf16_cuda(void*, const float*, uint16_t*, int64_t) { no_cuda("pack_bf16_cuda"); }
void unpack_bf16_divide_cuda(void*, const uint16_t*, float*, int64_t, float) { no_cuda("unpack_bf16_divide_cuda"); }

}  // namespace cnn
