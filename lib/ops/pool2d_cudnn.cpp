// Max and average pooling through cuDNN (cudnnPoolingForward / cudnnPoolingBackward).
// Our semantics map onto cuDNN's modes: max windows skip padding (Pool2dShape::make keeps every
// window overlapping the input), NaN propagates (CUDNN_PROPAGATE_NAN), backward is
// CUDNN_POOLING_MAX_DETERMINISTIC; average divides by the in-bounds count
// (CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING); P and Q are floor mode in both.
// Trap: which of several equal maxima receives the gradient is ours by definition (the first in
// window order); tests/ops/test_cudnn.cpp checks cuDNN against it on inputs full of ties.
#include <cudnn.h>

#include "core/error.h"
#include "cudnn/handle.h"
#include "ops/pool2d.h"

namespace cnn {
namespace {

struct PoolDescs {
  cudnn::TensorDescriptor x, y;  // (N, C, H, W), (N, C, P, Q)
  cudnn::PoolingDescriptor pool;
};

struct PoolCache {
  cudnn::ShapeMemo<PoolDescs> memo;
};

PoolDescs& descs(const ExecContext& ctx, const Pool2dShape& sh, const char* what) {
  const cudnn::ShapeKey key{
      {int64_t(sh.kind), sh.N, sh.C, sh.H, sh.W, sh.R, sh.S, sh.P, sh.Q, sh.stride_h, sh.stride_w, sh.pad_h, sh.pad_w}};
  return cudnn::slot<PoolCache>(ctx, cudnn::Slot::pool2d).memo.get(key, [&](PoolDescs& d) {
    CNN_CHECK(pool2d_cudnn_supports(sh), "{}: cuDNN cannot take this shape ({})", what, sh.to_string());
    cudnn::set_nchw(d.x, sh.N, sh.C, sh.H, sh.W, what);
    cudnn::set_nchw(d.y, sh.N, sh.C, sh.P, sh.Q, what);
    const cudnnPoolingMode_t mode =
        sh.kind == PoolKind::max ? CUDNN_POOLING_MAX_DETERMINISTIC : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
    CUDNN_CHECK(cudnnSetPooling2dDescriptor(d.pool, mode, CUDNN_PROPAGATE_NAN, static_cast<int>(sh.R),
                                            static_cast<int>(sh.S), sh.pad_h, sh.pad_w, sh.stride_h, sh.stride_w));
    int n = 0, c = 0, p = 0, q = 0;
    CUDNN_CHECK(cudnnGetPooling2dForwardOutputDim(d.pool, d.x, &n, &c, &p, &q));
    CNN_CHECK(n == sh.N && c == sh.C && p == sh.P && q == sh.Q, "{}: cuDNN computes output ({}, {}, {}, {}) for {}",
              what, n, c, p, q, sh.to_string());
  });
}

}  // namespace

bool pool2d_cudnn_supports(const Pool2dShape& sh) {
  if (sh.P < 1 || sh.Q < 1 || sh.R < 1 || sh.S < 1 || sh.stride_h < 1 || sh.stride_w < 1) return false;
  // Pool2dShape::make's rule, under which every window holds an input element (cuDNN would
  // otherwise see windows of padding only, where max and the average are undefined).
  if (sh.pad_h < 0 || sh.pad_w < 0 || 2 * int64_t{sh.pad_h} > sh.R || 2 * int64_t{sh.pad_w} > sh.S) return false;
  return cudnn::fits_nchw(sh.N, sh.C, sh.H, sh.W) && cudnn::fits_int(sh.R) && cudnn::fits_int(sh.S);
}

void pool2d_forward_cudnn(const Pool2dForward& a) {
  const char* what = "pool2d cudnn forward";
  const float* x = a.x.f32();
  float* y = a.y.f32();
  cudnnHandle_t h = cudnn::handle(*a.ctx, what);
  PoolDescs& d = descs(*a.ctx, a.sh, what);
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(cudnnPoolingForward(h, d.pool, &one, d.x, x, &zero, d.y, y));
}

// Average pooling reads neither x nor y (the pool layer does not keep them alive), so where they
// are null dx and dy, which have their shapes, stand in for them.
void pool2d_backward_cudnn(const Pool2dBackward& a) {
  const char* what = "pool2d cudnn backward";
  const Pool2dShape& sh = a.sh;
  const float *x = a.x.f32(), *y = a.y.f32(), *dy = a.dy.f32();
  float* dx = a.dx.f32();
  cudnnHandle_t h = cudnn::handle(*a.ctx, what);
  PoolDescs& d = descs(*a.ctx, sh, what);
  if (sh.kind == PoolKind::avg) {
    if (!x) x = dx;
    if (!y) y = dy;
  }
  CNN_CHECK(x && y && dy && dx, "{}: an operand is null", what);
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(cudnnPoolingBackward(h, d.pool, &one, d.y, y, d.y, dy, d.x, x, &zero, d.x, dx));
}

}  // namespace cnn
