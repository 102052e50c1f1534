// The cpu bf16 rows of every batchnorm entry point: the emulation the CUDA bf16 rows are tested
// against. Each widens its bf16 channels-last operands (x, y, dy) into f32 NCHW, runs the cpu f32
// row on them (same sums, same FP32 element arithmetic) and rounds each bf16 output (y, dx) once
// into channels-last. Statistics, sums, gamma/beta and their gradients pass through as FP32.
// Trap: a null operand stays null (dx, or y without an activation), and N may be 0 in the phased
// entry points, whose operands may then be null altogether.
#include <vector>

#include "core/checked.h"
#include "core/error.h"
#include "ops/batchnorm.h"
#include "ops/convert.h"

namespace cnn {
namespace {

// The logical dims of the activations, once their sizes are known to be sane (the f32 row checks
// the rest).
ActDims act_dims(const char* what, const BatchnormShape& sh) {
  if (sh.N < 0 || sh.C <= 0 || sh.H <= 0 || sh.W <= 0)
    CNN_THROW("{}: sizes must be positive (N may be 0 in the phased entry points), got N={} C={} H={} W={}", what,
              sh.N, sh.C, sh.H, sh.W);
  check_tensor_cap(checked_product({sh.N, sh.C, sh.H, sh.W}),
                   fmt::format("{}: the input (N={}, C={}, H={}, W={})", what, sh.N, sh.C, sh.H, sh.W));
  return ActDims{sh.N, sh.C, sh.H, sh.W};
}

// A bf16 operand widened into f32 NCHW (nothing for a null one).
struct Widened {
  std::vector<float> v;
  bool null = true;
  Widened(ConstView x, const ActDims& d) : null(x.null()) {
    if (!null) v = widen_bf16(x.bf16_data(), d);
  }
  ConstView view() const { return null ? ConstView(nullptr) : ConstView(v.data()); }
};

// An f32 NCHW output for a bf16 operand, narrowed into it by done() (nothing for a null one).
struct Narrowed {
  View dst;
  ActDims d;
  std::vector<float> v;
  Narrowed(View out, const ActDims& dims) : dst(out), d(dims) {
    if (!dst.null()) v.resize(size_t(d.numel()));
  }
  View view() { return dst.null() ? View(nullptr) : View(v.data()); }
  void done() {
    if (!dst.null()) narrow_to_bf16(v.data(), d, dst.bf16_data());
  }
};

}  // namespace

void batchnorm_forward_train_cpu_bf16(const BatchnormForwardTrain& a) {
  const ActDims d = act_dims("batchnorm forward", a.sh);
  Widened x(a.x, d);
  Narrowed y(a.y, d);
  BatchnormForwardTrain f = a;
  f.x = x.view();
  f.y = y.view();
  run_op(Backend::cpu, f);
  y.done();
}

void batchnorm_forward_infer_cpu_bf16(const BatchnormForwardInfer& a) {
  const ActDims d = act_dims("batchnorm inference", a.sh);
  Widened x(a.x, d);
  Narrowed y(a.y, d);
  BatchnormForwardInfer f = a;
  f.x = x.view();
  f.y = y.view();
  run_op(Backend::cpu, f);
  y.done();
}

void batchnorm_backward_cpu_bf16(const BatchnormBackward& a) {
  const ActDims d = act_dims("batchnorm backward", a.sh);
  Widened x(a.x, d), dy(a.dy, d);
  Narrowed dx(a.dx, d);
  BatchnormBackward f = a;
  f.x = x.view();
  f.dy = dy.view();
  f.dx = dx.view();
  run_op(Backend::cpu, f);
  dx.done();
}

void batchnorm_forward_stats_cpu_bf16(const BatchnormForwardStats& a) {
  const ActDims d = act_dims("batchnorm forward statistics", a.sh);
  Widened x(a.x, d);
  BatchnormForwardStats f = a;
  f.x = x.view();
  run_op(Backend::cpu, f);
}

void batchnorm_forward_apply_cpu_bf16(const BatchnormForwardApply& a) {
  const ActDims d = act_dims("batchnorm forward", a.sh);
  Widened x(a.x, d);
  Narrowed y(a.y, d);
  BatchnormForwardApply f = a;
  f.x = x.view();
  f.y = y.view();
  run_op(Backend::cpu, f);
  y.done();
}

void batchnorm_forward_infer_act_cpu_bf16(const BatchnormForwardInferAct& a) {
  const ActDims d = act_dims("batchnorm inference", a.sh);
  Widened x(a.x, d);
  Narrowed y(a.y, d);
  BatchnormForwardInferAct f = a;
  f.x = x.view();
  f.y = y.view();
  run_op(Backend::cpu, f);
  y.done();
}

// y is read only through the activation's derivative, so it is widened only with one.
void batchnorm_backward_stats_cpu_bf16(const BatchnormBackwardStats& a) {
  const ActDims d = act_dims("batchnorm backward statistics", a.sh);
  Widened x(a.x, d), y(a.act ? a.y : ConstView(nullptr), d), dy(a.dy, d);
  BatchnormBackwardStats f = a;
  f.x = x.view();
  f.y = y.view();
  f.dy = dy.view();
  run_op(Backend::cpu, f);
}

void batchnorm_backward_apply_cpu_bf16(const BatchnormBackwardApply& a) {
  const ActDims d = act_dims("batchnorm backward", a.sh);
  Widened x(a.x, d), y(a.act ? a.y : ConstView(nullptr), d), dy(a.dy, d);
  Narrowed dx(a.dx, d);
  BatchnormBackwardApply f = a;
  f.x = x.view();
  f.y = y.view();
  f.dy = dy.view();
  f.dx = dx.view();
  run_op(Backend::cpu, f);
  dx.done();
}

}  // namespace cnn
