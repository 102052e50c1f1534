// Activations through cudnnActivationForward / cudnnActivationBackward: relu, sigmoid, tanh and
// elu with alpha = 1 (cuDNN's coefficient is our alpha). cuDNN has no leaky relu.
// Trap: cuDNN's elu backward ignores the coefficient in the negative branch. Measured on an H200
// with cuDNN 9.14 at alpha 0.3 (forward matched): dx = dy e^x where ours (the derivative of
// alpha (e^x - 1)) is dy alpha e^x, e.g. 0.0488088131 for 0.0146426447 and 0.930122733 for
// 0.27903682, 1/alpha too large (to 7 digits), with x and y passed as cuDNN documents them. No
// choice of operands fixes it: a scale on the call scales the x > 0 branch too. (Scaling by alpha
// and adding (1 - alpha) relu'(x) dy in a second call with beta = 1 would be right out of place,
// but reads dy after the first call overwrote it when dx aliases dy, and is unmeasured.) So elu is
// claimed only for alpha = 1, where both conventions agree and the same test passed.
// Trap: the relu layer keeps x but not y for backward, and cuDNN does not say which of the two its
// relu derivative reads, so x is passed for both (relu(x) > 0 exactly where x > 0).
#include <cudnn.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "cudnn/handle.h"
#include "ops/activation.h"

namespace cnn {
namespace {

// Elements per call: the legacy API's tensor sizes are int.
constexpr int64_t kChunk = int64_t{1} << 30;

struct ActDescs {
  cudnn::TensorDescriptor t;  // (1, 1, 1, n)
  cudnn::ActivationDescriptor act;
};

struct ActCache {
  cudnn::ShapeMemo<ActDescs> memo;
};

cudnnActivationMode_t mode_of(ActivationKind k) {
  switch (k) {
    case ActivationKind::relu:
      return CUDNN_ACTIVATION_RELU;
    case ActivationKind::sigmoid:
      return CUDNN_ACTIVATION_SIGMOID;
    case ActivationKind::tanh:
      return CUDNN_ACTIVATION_TANH;
    case ActivationKind::elu:
      return CUDNN_ACTIVATION_ELU;
    case ActivationKind::leaky_relu:
      break;
  }
  CNN_THROW("activation {} has no cuDNN mode", to_string(k));
}

ActDescs& descs(const ExecContext& ctx, const ActivationParams& p, int64_t n, const char* what) {
  CNN_CHECK(activation_cudnn_supports(p), "{}: cuDNN has no {} with alpha {} matching ours", what, to_string(p.kind),
            p.alpha);
  uint32_t alpha_bits = 0;
  std::memcpy(&alpha_bits, &p.alpha, sizeof alpha_bits);
  const cudnn::ShapeKey key{{int64_t(p.kind), int64_t(alpha_bits), n}};
  return cudnn::slot<ActCache>(ctx, cudnn::Slot::activation).memo.get(key, [&](ActDescs& d) {
    cudnn::set_nchw(d.t, 1, 1, 1, n, what);
    // Our relu maps NaN to 0 (x > 0 ? x : 0); the others pass NaN through.
    const cudnnNanPropagation_t nan = p.kind == ActivationKind::relu ? CUDNN_NOT_PROPAGATE_NAN : CUDNN_PROPAGATE_NAN;
    CUDNN_CHECK(cudnnSetActivationDescriptor(d.act, mode_of(p.kind), nan, static_cast<double>(p.alpha)));
  });
}

void check_count(const char* what, int64_t n) {
  if (n < 0) CNN_THROW("{}: element count must be non-negative, got {}", what, n);
}

// f(handle, descriptors, first element) for each chunk of at most kChunk elements of a.n.
template <typename Args, typename F>
void for_each_chunk(const Args& a, const char* what, F&& f) {
  check_count(what, a.n);
  cudnnHandle_t h = cudnn::handle(*a.ctx, what);
  for (int64_t at = 0; at < a.n; at += kChunk) f(h, descs(*a.ctx, a.p, std::min(kChunk, a.n - at), what), at);
}

}  // namespace

bool activation_cudnn_supports(const ActivationParams& p) {
  switch (p.kind) {
    case ActivationKind::relu:
    case ActivationKind::sigmoid:
    case ActivationKind::tanh:
      return true;
    case ActivationKind::elu:
      return p.alpha == 1.0f;  // see the trap at the top: cuDNN's derivative is ours only there
    case ActivationKind::leaky_relu:
      return false;
  }
  return false;
}

void activation_forward_cudnn(const ActivationForward& a) {
  const float* x = a.x.f32();
  float* y = a.y.f32();
  const float one = 1.0f, zero = 0.0f;
  for_each_chunk(a, "activation cudnn forward", [&](cudnnHandle_t h, ActDescs& d, int64_t at) {
    CUDNN_CHECK(cudnnActivationForward(h, d.act, &one, d.t, x + at, &zero, d.t, y + at));
  });
}

void activation_backward_cudnn(const ActivationBackward& a) {
  const float *x = a.x.f32(), *dy = a.dy.f32();
  const float* y = a.p.kind == ActivationKind::relu ? x : a.y.f32();  // unread for relu
  float* dx = a.dx.f32();
  const float one = 1.0f, zero = 0.0f;
  for_each_chunk(a, "activation cudnn backward", [&](cudnnHandle_t h, ActDescs& d, int64_t at) {
    CUDNN_CHECK(cudnnActivationBackward(h, d.act, &one, d.t, y + at, d.t, dy + at, d.t, x + at, &zero, d.t, dx + at));
  });
}

}  // namespace cnn
