// dense layer: y = x w^T + b over the flattened per-sample input (any rank), weights (units, C).
// A fused activation runs in place on y after the GEMM; its backward rewrites dy in place as
// act'(y) dy (dy is this layer's own gradient buffer, dead after its backward).
#include "layers/registry.h"
#include "ops/activation.h"
#include "ops/convert.h"
#include "ops/dense.h"

namespace cnn {
namespace {

class DenseLayer : public Layer {
 public:
  explicit DenseLayer(const LayerSpec& spec) : Layer(spec) {
    m_units = spec.attrs["units"].integer();
    m_bias = spec.attrs["bias"].boolean();
    m_init = parse_init(spec.attrs["init"].string());
  }

  Shape infer_shape(const std::vector<Shape>& in) override {
    m_shape = DenseShape{1, in[0].numel(), m_units, m_bias};
    m_spatial = in[0].rank() == 3 ? in[0][1] * in[0][2] : 1;
    return Shape{m_units};
  }

  std::vector<ParamInfo> params() const override {
    std::vector<ParamInfo> p;
    p.push_back(
        {"weight", Shape{m_units, m_shape.C}, InitSpec{m_init, double(m_shape.C), double(m_units)}, true, true});
    if (m_bias) p.push_back({"bias", Shape{m_units}, InitSpec{InitKind::zeros}, true, true});
    return p;
  }

  // The weights' columns are the features in (C, H, W) order. A channels-last (C, H, W) input
  // holds them in (H, W, C) order: read flat, it would train weights that mean something else in
  // f32, in a checkpoint and in an ONNX export. A flatten layer permutes; a dense layer does not.
  std::string dtype_refusal(DType t) const override {
    if (activation_layout(t) != Layout::nhwc || m_spatial == 1) return "";
    return fmt::format("its input is a {}-position feature map, which {} stores channels-last (add a flatten "
                       "layer before it to run it in {})", m_spatial, to_string(t), to_string(t));
  }
  double forward_flops() const override { return m_shape.flops_forward(); }
  bool supports(Backend b) const override {
    return op_supports(b, dtype(), DenseForward{nullptr, m_shape}) &&
           op_supports(b, dtype(), DenseBackward{nullptr, m_shape});
  }
  size_t workspace_bytes(int64_t batch) const override {
    // The cuda bf16 and f16 rows take the same scratch (a 2-byte weight copy); f32 and cpu rows none.
    if (backend() != Backend::cuda || !is_16bit(dtype())) return 0;
    DenseShape sh = m_shape;
    sh.N = batch;
    return dense_bf16_workspace_bytes(sh);
  }
  // The cuda bf16/f16 rows read a (K, C) copy of the weights in the activations' dtype, forward and
  // backward (for dx) alike: one copy.
  std::vector<WeightPackRequest> weight_pack_requests(int64_t, bool) const override {
    if (backend() != Backend::cuda || !is_16bit(dtype()) || m_units * m_shape.C > int64_t{0x7fffffff}) return {};
    return {{0, 0, WeightsBf16Dims{int(m_units), int(m_shape.C), 1, 1},
             PackedWeights16{nullptr, dtype(), Bf16WeightLayout::kcrs}}};
  }
  void bind_weight_packs(const std::vector<WeightPackRequest>& bound) override {
    m_w16 = bound.empty() ? PackedWeights16{} : bound.front().copy;
  }
  bool backward_needs_output() const override { return m_fused; }
  bool fuse_activation(const ActivationParams* act) override {
    m_fused = act && activation_fusable(*act) && (backend() == Backend::cpu || backend() == Backend::cuda);
    if (m_fused) m_act = *act;
    return m_fused;
  }

  void forward(const RunContext& rc, const std::vector<const Tensor*>& x, Tensor& y) override {
    DenseShape sh = m_shape;
    sh.N = x[0]->shape()[0];
    const ConstView b = m_bias ? ConstView(m_params[1].view()) : nullptr;
    run_op(backend(), DenseForward{rc.exec, sh, x[0]->view(), m_params[0].view(), b, y.view(), math(), prepacked(rc)});
    if (m_fused) run_op(backend(), ActivationForward{rc.exec, m_act, y.numel(), y.view(), y.view()});
  }

  void backward(const RunContext& rc, const std::vector<const Tensor*>& x, const Tensor& y, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    DenseShape sh = m_shape;
    sh.N = x[0]->shape()[0];
    const View dxv = dx[0] ? dx[0]->view() : nullptr;
    const View db = m_bias ? m_grads[1].view() : nullptr;
    if (m_fused) {
      Tensor& g = const_cast<Tensor&>(dy);  // this layer's own gradient buffer (see the top)
      run_op(backend(), ActivationBackwardFromOutput{rc.exec, m_act, g.numel(), y.view(), g.view(), g.view()});
    }
    run_op(backend(), DenseBackward{rc.exec, sh, x[0]->view(), m_params[0].view(), dy.view(), dxv, m_grads[0].view(),
                                    db, math(), prepacked(rc)});
  }

  std::string summary() const override { return fmt::format("{} -> {}", m_shape.C, m_units); }

 private:
  // The bound copy while it is fresh and still what the cuda 16-bit row reads.
  PackedWeights16 prepacked(const RunContext& rc) const {
    const bool fits = rc.weights_packed && backend() == Backend::cuda && m_w16.dtype == dtype();
    return fits ? m_w16 : PackedWeights16{};
  }

  int64_t m_units = 0;
  bool m_bias = true;
  InitKind m_init = InitKind::he_normal;
  DenseShape m_shape;
  int64_t m_spatial = 1;  // H * W of a (C, H, W) input, else 1
  bool m_fused = false;
  ActivationParams m_act;
  PackedWeights16 m_w16;  // the bound (K, C) copy (bind_weight_packs), or none
};

}  // namespace

Schema dense_schema() {
  Schema s("dense", "fully connected, y = x W^T + b, over the flattened input");
  s.key("units", Type::integer(1, kMaxDimension), "outputs (the final layer's: one per class)").required();
  s.key("bias", Type::boolean(), "add a learned bias").defaults_to(true);
  s.key("init", Type::choice(weight_init_names()), "weight initialiser (He: Kaiming; Xavier: Glorot)").defaults_to("he_normal");
  return s;
}

std::unique_ptr<Layer> make_dense_layer(const LayerSpec& spec) { return std::make_unique<DenseLayer>(spec); }

}  // namespace cnn
