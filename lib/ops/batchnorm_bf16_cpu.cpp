// The cpu bf16 rows of every batchnorm entry point, which are its cpu f16 rows too: the emulation
// the CUDA bf16 and f16 rows are tested against. Each widens its 16-bit channels-last operands (x, y, dy) into f32 NCHW, runs the cpu f32
// row on them (same sums, same FP32 element arithmetic) and rounds each bf16 output (y, dx) once
// into channels-last. Statistics, sums, gamma/beta and their gradients pass through as FP32.
// Trap: a null operand stays null (dx, or y without an activation), and N may be 0 in the phased
// entry points, whose operands may then be null altogether.
#include <initializer_list>
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

// Runs the cpu f32 row on a copy of `a` whose bf16 operands `in` are widened into f32 NCHW and
// whose bf16 outputs `out` are f32 NCHW buffers, then rounds those once into the outputs. A null
// operand becomes a null f32 view.
template <typename Args>
void run_widened(const Args& a, const char* what, std::initializer_list<ConstView Args::*> in,
                 std::initializer_list<View Args::*> out) {
  const ActDims d = act_dims(what, a.sh);
  Args f = a;
  std::vector<std::vector<float>> buffers;  // moving a vector keeps its data where it is
  buffers.reserve(in.size() + out.size());
  for (ConstView Args::*m : in) {
    if ((a.*m).null()) {
      f.*m = ConstView(nullptr);
      continue;
    }
    buffers.push_back(widen(a.*m, d));
    f.*m = ConstView(buffers.back().data());
  }
  for (View Args::*m : out) {
    if ((a.*m).null()) {
      f.*m = View(nullptr);
      continue;
    }
    buffers.emplace_back(size_t(d.numel()));
    f.*m = View(buffers.back().data());
  }
  run_op(Backend::cpu, f);
  size_t at = buffers.size() - out.size();
  for (View Args::*m : out)
    if (!(a.*m).null()) narrow(buffers[at++].data(), d, a.*m);
}

}  // namespace

using Train = BatchnormForwardTrain;
using Infer = BatchnormForwardInfer;
using Backward = BatchnormBackward;
using Stats = BatchnormForwardStats;
using Apply = BatchnormForwardApply;
using InferAct = BatchnormForwardInferAct;
using BackwardStats = BatchnormBackwardStats;
using BackwardApply = BatchnormBackwardApply;

void batchnorm_forward_train_cpu_bf16(const Train& a) {
  run_widened(a, "batchnorm forward", {&Train::x}, {&Train::y});
}
void batchnorm_forward_infer_cpu_bf16(const Infer& a) {
  run_widened(a, "batchnorm inference", {&Infer::x}, {&Infer::y});
}
void batchnorm_backward_cpu_bf16(const Backward& a) {
  run_widened(a, "batchnorm backward", {&Backward::x, &Backward::dy}, {&Backward::dx});
}
void batchnorm_forward_stats_cpu_bf16(const Stats& a) { run_widened(a, "batchnorm forward statistics", {&Stats::x}, {}); }
void batchnorm_forward_apply_cpu_bf16(const Apply& a) {
  run_widened(a, "batchnorm forward", {&Apply::x}, {&Apply::y});
}
void batchnorm_forward_infer_act_cpu_bf16(const InferAct& a) {
  run_widened(a, "batchnorm inference", {&InferAct::x}, {&InferAct::y});
}
// y is read only through the activation's derivative, so it is widened only with one that reads it
// (a sign-only activation given beta takes its derivative from x: batchnorm.h).
void batchnorm_backward_stats_cpu_bf16(const BackwardStats& a) {
  BackwardStats b = a;
  if (!a.act || batchnorm_grad_from_z(a.act, a.gamma, a.beta)) b.y = nullptr;
  run_widened(b, "batchnorm backward statistics", {&BackwardStats::x, &BackwardStats::y, &BackwardStats::dy}, {});
}
void batchnorm_backward_apply_cpu_bf16(const BackwardApply& a) {
  BackwardApply b = a;
  if (!a.act || batchnorm_grad_from_z(a.act, a.gamma, a.beta)) b.y = nullptr;
  run_widened(b, "batchnorm backward", {&BackwardApply::x, &BackwardApply::y, &BackwardApply::dy},
              {&BackwardApply::dx});
}

}  // namespace cnn
