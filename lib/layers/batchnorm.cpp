// batchnorm layer over (C, H, W) or (C) inputs: parameters weight/bias (gamma/beta), buffers
// running_mean/running_var (PyTorch names). Batch statistics in training, running ones in eval.
// Trap: backward is only valid after a training-mode forward of the same batch.
#include "layers/registry.h"
#include "ops/batchnorm.h"
#include "ops/cudnn_ops.h"

namespace cnn {
namespace {

class BatchnormLayer : public Layer {
 public:
  explicit BatchnormLayer(const LayerSpec& spec) : Layer(spec) {
    m_momentum = m_node->get<double>("momentum", m_momentum);
    m_eps = m_node->get<double>("eps", m_eps);
    if (!(m_momentum >= 0.0 && m_momentum <= 1.0))
      m_node->at("momentum").fail(fmt::format("expected momentum in [0, 1], found {}", m_momentum));
    if (!(m_eps > 0.0)) m_node->at("eps").fail(fmt::format("expected eps > 0, found {}", m_eps));
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
    if (b != Backend::cudnn) return Layer::supports(b);
    BatchnormShape sh;
    sh.N = 1, sh.C = m_C, sh.H = m_HW, sh.W = 1, sh.eps = m_eps, sh.momentum = m_momentum;
    return cudnn_ops_built() && batchnorm_cudnn_supports(sh);
  }

  void prepare(int64_t max_batch, Device device) override {
    m_save_mean = Tensor::zeros(Shape{m_C}, device, name() + ".save_mean");
    m_save_inv_std = Tensor::zeros(Shape{m_C}, device, name() + ".save_inv_std");
  }

  BatchnormShape shape_for(const Tensor& x) const {
    BatchnormShape sh;
    sh.N = x.shape()[0];
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
    if (rc.training)
      batchnorm_forward_train(backend(), *rc.exec, sh, x[0]->data(), gamma, beta, y.data(), rmean, rvar,
                              m_save_mean.data(), m_save_inv_std.data());
    else
      batchnorm_forward_infer(backend(), *rc.exec, sh, x[0]->data(), gamma, beta, rmean, rvar, y.data());
  }

  void backward(const RunContext& rc, const std::vector<const Tensor*>& x, const Tensor& y, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    BatchnormShape sh = shape_for(*x[0]);
    float* dxp = dx[0] ? dx[0]->data() : nullptr;
    batchnorm_backward(backend(), *rc.exec, sh, x[0]->data(), m_params[0].data(), m_save_mean.data(),
                       m_save_inv_std.data(), dy.data(), dxp, m_grads[0].data(), m_grads[1].data());
  }

  std::string summary() const override { return fmt::format("eps {} mom {}", m_eps, m_momentum); }

 private:
  double m_momentum = 0.1;
  double m_eps = 1e-5;
  int64_t m_C = 0, m_HW = 1;
  Tensor m_save_mean, m_save_inv_std;
};

}  // namespace

std::unique_ptr<Layer> make_batchnorm_layer(const LayerSpec& spec) { return std::make_unique<BatchnormLayer>(spec); }

}  // namespace cnn
