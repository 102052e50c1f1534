// Every implementation of every op entry point, listed explicitly (no static self-registration):
// one table per argument struct, rows {backend, dtype, name, supports, run} (ops/dispatch.h).
// Trap: CUDA and cuDNN rows are wrapped in CNN_CUDA_ROWS, the one #ifdef of lib/ops outside the
// walled files: a build without CUDA has no such rows (and no stand-ins), so asking for them
// throws from the dispatcher. A BF16 row goes next to its f32 sibling in the same table.
#include "ops/activation.h"
#include "ops/dispatch.h"

#ifdef CNN_WITH_CUDA
#define CNN_CUDA_ROWS(...) __VA_ARGS__,
#else
#define CNN_CUDA_ROWS(...)
#endif

namespace cnn {

bool backend_built(Backend b) {
#ifdef CNN_WITH_CUDA
  return true;
#else
  return b == Backend::cpu;
#endif
}

namespace {

constexpr Backend kCpu = Backend::cpu, kCuda = Backend::cuda, kCudnn = Backend::cudnn;
constexpr DType kF32 = DType::f32;

template <typename Args>
bool activation_on_cudnn(const Args& a) {
  return activation_cudnn_supports(a.p);
}

}  // namespace

const OpTable<ActivationForward>& ActivationForward::table() {
  static const OpTable<ActivationForward> t{
      "activation forward",
      {{kCpu, kF32, "cpu", nullptr, activation_forward_cpu},
       CNN_CUDA_ROWS({kCuda, kF32, "cuda", nullptr, activation_forward_cuda},
                     {kCudnn, kF32, "cudnn", activation_on_cudnn, activation_forward_cudnn})}};
  return t;
}

const OpTable<ActivationBackward>& ActivationBackward::table() {
  static const OpTable<ActivationBackward> t{
      "activation backward",
      {{kCpu, kF32, "cpu", nullptr, activation_backward_cpu},
       CNN_CUDA_ROWS({kCuda, kF32, "cuda", nullptr, activation_backward_cuda},
                     {kCudnn, kF32, "cudnn", activation_on_cudnn, activation_backward_cudnn})}};
  return t;
}

const OpTable<ActivationBackwardFromOutput>& ActivationBackwardFromOutput::table() {
  static const OpTable<ActivationBackwardFromOutput> t{
      "activation backward_from_output",
      {{kCpu, kF32, "cpu", nullptr, activation_backward_from_output_cpu},
       CNN_CUDA_ROWS({kCuda, kF32, "cuda", nullptr, activation_backward_from_output_cuda})}};
  return t;
}

}  // namespace cnn
