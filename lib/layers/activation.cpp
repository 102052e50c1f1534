// Activation layers relu, leaky_relu (alpha, default 0.01), elu (alpha, default 1.0), sigmoid,
// tanh: one class, the type picks the function. Output shape equals input shape.
#include "layers/registry.h"
#include "ops/activation.h"

namespace cnn {
namespace {

class ActivationLayer : public Layer {
 public:
  explicit ActivationLayer(const LayerSpec& spec) : Layer(spec) {
    const std::string& t = type();
    if (t == "relu")
      m_p.kind = ActivationKind::relu;
    else if (t == "leaky_relu")
      m_p = {ActivationKind::leaky_relu, float(spec.attrs["alpha"].real())};
    else if (t == "elu")
      m_p = {ActivationKind::elu, float(spec.attrs["alpha"].real())};
    else if (t == "sigmoid")
      m_p.kind = ActivationKind::sigmoid;
    else if (t == "tanh")
      m_p.kind = ActivationKind::tanh;
    else
      CNN_THROW("activation layer built for type '{}'", t);
  }

  Shape infer_shape(const std::vector<Shape>& in) override {
    m_numel = in[0].numel();
    return in[0];
  }
  double forward_flops() const override { return double(m_numel); }
  double backward_flops() const override { return double(m_numel); }
  // cuDNN has relu, sigmoid, tanh and elu (alpha = 1 only: its derivative drops alpha), not leaky_relu.
  bool supports(Backend b) const override {
    return op_supports(b, dtype(), ActivationForward{nullptr, m_p, m_numel}) &&
           op_supports(b, dtype(), ActivationBackward{nullptr, m_p, m_numel});
  }
  bool backward_needs_output() const override {
    return m_p.kind == ActivationKind::sigmoid || m_p.kind == ActivationKind::tanh || m_p.kind == ActivationKind::elu;
  }

  const ActivationParams* activation() const override { return &m_p; }

  void forward(const RunContext& rc, const std::vector<const Tensor*>& x, Tensor& y) override {
    run_op(backend(), ActivationForward{rc.exec, m_p, x[0]->numel(), x[0]->view(), y.view()});
  }

  void backward(const RunContext& rc, const std::vector<const Tensor*>& x, const Tensor& y, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    if (!dx[0]) return;
    run_op(backend(), ActivationBackward{rc.exec, m_p, dy.numel(), x[0]->view(), y.view(), dy.view(), dx[0]->view()});
  }

  std::string summary() const override {
    return m_p.kind == ActivationKind::leaky_relu || m_p.kind == ActivationKind::elu
               ? fmt::format("alpha {}", m_p.alpha)
               : "";
  }

 private:
  ActivationParams m_p;
  int64_t m_numel = 0;
};

}  // namespace

Schema activation_schema(const std::string& type) {
  if (type == "relu") return Schema(type, "max(x, 0)");
  if (type == "sigmoid") return Schema(type, "1 / (1 + e^-x)");
  if (type == "tanh") return Schema(type, "tanh(x)");
  const bool leaky = type == "leaky_relu";
  CNN_CHECK(leaky || type == "elu", "no activation type '{}'", type);
  Schema s(type, leaky ? "x for x > 0, alpha x below" : "x for x > 0, alpha (e^x - 1) below");
  s.key("alpha", Type::real(-1e6, 1e6), leaky ? "slope below 0" : "scale below 0 (cudnn: 1 only)")
      .defaults_to(leaky ? 0.01 : 1.0);
  return s;
}

std::unique_ptr<Layer> make_activation_layer(const LayerSpec& spec) { return std::make_unique<ActivationLayer>(spec); }

}  // namespace cnn
