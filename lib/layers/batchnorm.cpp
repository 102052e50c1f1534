// batchnorm layer over (C, H, W) or (C) inputs: parameters weight/bias (gamma/beta), buffers
// running_mean/running_var (PyTorch names). Batch statistics in training, running ones in eval.
// Trap: backward is only valid after a training-mode forward of the same batch. With a fused
// activation or synchronised statistics it runs the phased ops on our cpu/cuda kernels (a cudnn
// choice runs them on cuda; without synchronisation both phases in one call, BatchnormForwardTrainAct
// and BatchnormBackwardAct), and a fused layer's backward reads its own output (relu and leaky_relu
// outside fp32: their derivative from x, see ops/batchnorm.h). With a folded conv
// bias (take_mean_offset) every forward op gets that bias as its mean_offset, which cuDNN's rows
// refuse, so such a layer runs our kernels.
#include "core/device.h"
#include "layers/registry.h"
#include "ops/batchnorm.h"

namespace cnn {
namespace {

class BatchnormLayer : public Layer {
 public:
  explicit BatchnormLayer(const LayerSpec& spec) : Layer(spec) {
    m_momentum = spec.attrs["momentum"].real();
    m_eps = spec.attrs["eps"].real();
  }

  Shape infer_shape(const std::vector<Shape>& in) override {
    const Shape& s = in[0];
    if (s.rank() != 3 && s.rank() != 1) fail(fmt::format("expects a (C, H, W) or (C) input, got {}", s.to_string()));
    m_C = s[0];
    m_HW = s.rank() == 3 ? s[1] * s[2] : 1;
    return s;
  }

  std::vector<ParamInfo> params() const override {
    return {{"weight", Shape{m_C}, InitSpec{InitKind::ones}, true, true},
            {"bias", Shape{m_C}, InitSpec{InitKind::zeros}, true, true},
            {"running_mean", Shape{m_C}, InitSpec{InitKind::zeros}, false, false},
            {"running_var", Shape{m_C}, InitSpec{InitKind::ones}, false, false}};
  }
  double forward_flops() const override { return 4.0 * m_C * m_HW; }
  double backward_flops() const override { return 8.0 * m_C * m_HW; }
  bool supports(Backend b) const override {
    const BatchnormShape sh = shape_for_batch(1);
    // Rows ask only whether there is an offset: any non-null pointer stands for the bound one.
    static const float kSomeOffset = 0.0f;
    const float* off = m_offset_from ? &kSomeOffset : nullptr;
    BatchnormForwardTrain train{nullptr, sh};
    train.mean_offset = off;
    BatchnormForwardInfer infer{nullptr, sh};
    infer.mean_offset = off;
    return op_supports(b, dtype(), train) && op_supports(b, dtype(), infer) &&
           op_supports(b, dtype(), BatchnormBackward{nullptr, sh});
  }

  void prepare(int64_t max_batch, Device device) override {
    m_save_mean = Tensor::zeros(Shape{m_C}, device, name() + ".save_mean");
    m_save_inv_std = Tensor::zeros(Shape{m_C}, device, name() + ".save_inv_std");
    // Two (2C + 1)-double blocks (forward stats, backward sums) in float storage.
    m_sums = Tensor::zeros(Shape{4 * (2 * m_C + 1)}, device, name() + ".sums");
  }

  bool backward_needs_output() const override { return m_fused; }
  bool fuse_activation(const ActivationParams* act) override {
    m_fused = act && activation_fusable(*act) && (backend() == Backend::cpu || backend() == Backend::cuda);
    if (m_fused) m_act = *act;
    return m_fused;
  }
  // An explicit `backend: cudnn` keeps the bias where it is (cuDNN takes no offset).
  bool take_mean_offset(const Layer* from) override {
    m_offset_from = from && requested_backend() != "cudnn" ? from : nullptr;
    return m_offset_from != nullptr;
  }
  bool set_stats_reducer(StatsReducer* sync) override {
    m_sync = sync;
    return true;
  }

  BatchnormShape shape_for(const Tensor& x) const { return shape_for_batch(x.shape()[0]); }
  BatchnormShape shape_for_batch(int64_t N) const {
    BatchnormShape sh;
    sh.N = N;
    sh.C = m_C;
    sh.H = m_HW;
    sh.W = 1;
    sh.eps = m_eps;
    sh.momentum = m_momentum;
    return sh;
  }

  void forward(const RunContext& rc, const std::vector<const Tensor*>& x, Tensor& y) override {
    BatchnormShape sh = shape_for(*x[0]);
    float *gamma = m_params[0].data(), *beta = m_params[1].data();
    float *rmean = m_params[2].data(), *rvar = m_params[3].data();
    const ActivationParams* act = m_fused ? &m_act : nullptr;
    const float* off = mean_offset();
    if (!rc.training) {
      if (act)
        run_op(own_kernels(),
               BatchnormForwardInferAct{rc.exec, sh, x[0]->view(), gamma, beta, rmean, rvar, act, y.view(), off});
      else
        run_op(backend(), BatchnormForwardInfer{rc.exec, sh, x[0]->view(), gamma, beta, rmean, rvar, y.view(), off});
    } else if (act || m_sync) {
      phased_forward(rc, sh, x[0]->view(), y.view());
    } else {
      run_op(backend(), BatchnormForwardTrain{rc.exec, sh, x[0]->view(), gamma, beta, y.view(), rmean, rvar,
                                              m_save_mean.data(), m_save_inv_std.data(), off});
    }
  }

  void backward(const RunContext& rc, const std::vector<const Tensor*>& x, const Tensor& y, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    BatchnormShape sh = shape_for(*x[0]);
    const View dxv = dx[0] ? dx[0]->view() : nullptr;
    if (m_fused || m_sync) return phased_backward(rc, sh, x[0]->view(), y.view(), dy.view(), dxv);
    run_op(backend(), BatchnormBackward{rc.exec, sh, x[0]->view(), m_params[0].data(), m_save_mean.data(),
                                        m_save_inv_std.data(), dy.view(), dxv, m_grads[0].data(), m_grads[1].data()});
  }

  // A rank without samples: zeros into the same reductions; the forward still updates the running
  // statistics from the global sums, so every rank keeps identical buffers.
  void join_sync_idle(const RunContext& rc, bool backward) override {
    if (!m_sync) return;
    BatchnormShape sh = shape_for_batch(0);
    const Device d = rc.exec->device;
    double* block = sums(backward);
    device_memset_zero(d, block, size_t(2 * m_C + 1) * sizeof(double));
    m_sync->sum(block, 2 * m_C + 1, d);
    if (!backward)
      run_op(own_kernels(), BatchnormForwardApply{rc.exec, sh, block, nullptr, m_params[0].data(), m_params[1].data(),
                                              nullptr, nullptr, m_params[2].data(), m_params[3].data(),
                                              m_save_mean.data(), m_save_inv_std.data(), mean_offset()});
  }

  std::string summary() const override { return fmt::format("eps {} mom {}", m_eps, m_momentum); }

 private:
  // The folded conv bias (null: none), at its bound storage.
  const float* mean_offset() const { return m_offset_from ? m_offset_from->folded_bias() : nullptr; }
  double* sums(bool backward) {
    return reinterpret_cast<double*>(m_sums.data()) + (backward ? 2 * m_C + 1 : 0);
  }

  // Statistics of this rank, summed over the ranks when synchronised, then normalise (+ act); one
  // call for both phases when nothing is summed between them (its cuda bf16/f16 rows may fuse them).
  void phased_forward(const RunContext& rc, const BatchnormShape& sh, ConstView x, View y) {
    double* stats = sums(false);
    float* rmean = m_params[2].data();
    const float* off = mean_offset();
    if (!m_sync)
      return run_op(own_kernels(), BatchnormForwardTrainAct{rc.exec, sh, x, m_params[0].data(), m_params[1].data(),
                                                        m_fused ? &m_act : nullptr, y, rmean, m_params[3].data(),
                                                        m_save_mean.data(), m_save_inv_std.data(), stats, off});
    run_op(own_kernels(), BatchnormForwardStats{rc.exec, sh, x, rmean, stats, off});
    m_sync->sum(stats, 2 * m_C + 1, rc.exec->device);
    run_op(own_kernels(), BatchnormForwardApply{rc.exec, sh, stats, x, m_params[0].data(), m_params[1].data(),
                                            m_fused ? &m_act : nullptr, y, rmean, m_params[3].data(),
                                            m_save_mean.data(), m_save_inv_std.data(), off});
  }

  void phased_backward(const RunContext& rc, const BatchnormShape& sh, ConstView x, ConstView y, ConstView dy,
                       View dx) {
    double* s = sums(true);
    const ActivationParams* act = m_fused ? &m_act : nullptr;
    // A sign-only activation's derivative from x, not y (ops/batchnorm.h), in every precision but
    // fp32, whose forward forms the activation's input its own way.
    const float* beta = dtype() == DType::f32 ? nullptr : m_params[1].data();
    const float* gamma = m_params[0].data();
    if (!m_sync)
      return run_op(own_kernels(), BatchnormBackwardAct{rc.exec, sh, x, y, act, gamma, m_save_mean.data(),
                                                    m_save_inv_std.data(), dy, s, dx, m_grads[0].data(),
                                                    m_grads[1].data(), beta});
    run_op(own_kernels(), BatchnormBackwardStats{rc.exec, sh, x, y, act, m_save_mean.data(), m_save_inv_std.data(), dy, s,
                                             m_grads[0].data(), m_grads[1].data(), gamma, beta});
    m_sync->sum(s, 2 * m_C + 1, rc.exec->device);
    run_op(own_kernels(), BatchnormBackwardApply{rc.exec, sh, s, x, y, act, gamma, m_save_mean.data(),
                                             m_save_inv_std.data(), dy, dx, beta});
  }

  bool m_fused = false;
  ActivationParams m_act;
  StatsReducer* m_sync = nullptr;
  const Layer* m_offset_from = nullptr;  // the conv2d whose bias is folded into this layer's mean
  Tensor m_sums;
  double m_momentum = 0;
  double m_eps = 0;
  int64_t m_C = 0, m_HW = 1;
  Tensor m_save_mean, m_save_inv_std;
};

}  // namespace

Schema batchnorm_schema() {
  const double momentum = 0.1, eps = 1e-5;  // PyTorch's defaults
  Schema s("batchnorm", "normalises each channel: batch statistics in training, running ones in evaluation");
  s.key("momentum", Type::real(0.0, 1.0), "weight of the batch in the running statistics").defaults_to(momentum);
  s.key("eps", Type::real(0.0, 1.0, true), "added to the variance").defaults_to(eps);
  return s;
}

std::unique_ptr<Layer> make_batchnorm_layer(const LayerSpec& spec) { return std::make_unique<BatchnormLayer>(spec); }

}  // namespace cnn
