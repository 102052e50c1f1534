// conv2d layer: attributes filters, kernel, stride, padding (int, [h, w] or "same"), dilation,
// groups, bias, init. Depthwise is groups == channels; a separable conv is depthwise + 1x1.
// Trap: "same" padding is only exact for odd effective kernels; even ones are rejected.
#include "layers/registry.h"
#include "ops/conv2d.h"
#include "ops/cudnn_ops.h"

namespace cnn {
namespace {

class Conv2dLayer : public Layer {
 public:
  explicit Conv2dLayer(const LayerSpec& spec) : Layer(spec) {
    ConfigNode& n = *m_node;
    m_filters = n.get<int64_t>("filters");
    if (m_filters < 1) n.at("filters").fail(fmt::format("expected filters >= 1, found {}", m_filters));
    if (!n.has("kernel")) n.at("kernel");  // throws "missing required key"
    m_kernel = n.get_pair("kernel", m_kernel);
    if (m_kernel.first < 1 || m_kernel.second < 1) n.at("kernel").fail("expected a kernel size >= 1");
    m_stride = n.get_pair("stride", m_stride);
    m_dilation = n.get_pair("dilation", m_dilation);
    ConfigNode* pad = n.find("padding");
    if (pad && pad->is_scalar() && pad->as_string() == "same") {
      m_same = true;
    } else {
      m_padding = n.get_pair("padding", m_padding);
    }
    m_groups = n.get<int64_t>("groups", m_groups);
    m_bias = n.get<bool>("bias", m_bias);
    m_init = parse_init(n.get_choice("init", weight_init_names(), "he_normal"));
    for (auto [v, key] : {std::pair{m_stride, "stride"}, std::pair{m_dilation, "dilation"}}) {
      if (v.first < 1 || v.second < 1) n.at(key).fail(fmt::format("expected {} >= 1", key));
    }
    if (m_padding.first < 0 || m_padding.second < 0) n.at("padding").fail("expected padding >= 0");
    if (m_groups < 1) n.at("groups").fail(fmt::format("expected groups >= 1, found {}", m_groups));
  }

  Shape infer_shape(const std::vector<Shape>& in) override {
    expect_rank(in[0], 3, "a (C, H, W)");
    int64_t C = in[0][0], H = in[0][1], W = in[0][2];
    if (m_same) {
      int64_t eh = m_dilation.first * (m_kernel.first - 1), ew = m_dilation.second * (m_kernel.second - 1);
      if (eh % 2 || ew % 2) fail("padding 'same' needs an odd (dilated) kernel size");
      m_padding = {eh / 2, ew / 2};
    }
    if (C % m_groups != 0) fail(fmt::format("input has {} channels, not divisible by groups {}", C, m_groups));
    if (m_filters % m_groups != 0) fail(fmt::format("filters {} not divisible by groups {}", m_filters, m_groups));
    try {
      m_shape = Conv2dShape::make(1, C, H, W, m_filters, m_kernel.first, m_kernel.second, int(m_stride.first),
                                  int(m_stride.second), int(m_padding.first), int(m_padding.second),
                                  int(m_dilation.first), int(m_dilation.second), int(m_groups), m_bias);
    } catch (const Error& e) {
      fail(fmt::format("input {} does not fit: {}", in[0].to_string(), e.what()));
    }
    return Shape{m_filters, m_shape.P, m_shape.Q};
  }

  std::vector<ParamInfo> params() const override {
    int64_t cg = m_shape.C / m_groups;
    double rs = double(m_shape.R * m_shape.S);
    std::vector<ParamInfo> p;
    p.push_back({"weight", Shape{m_filters, cg, m_shape.R, m_shape.S},
                 InitSpec{m_init, cg * rs, m_filters / double(m_groups) * rs}, true, true});
    if (m_bias) p.push_back({"bias", Shape{m_filters}, InitSpec{InitKind::zeros}, true, true});
    return p;
  }

  double forward_flops() const override { return m_shape.flops_forward(); }
  bool supports(Backend b) const override {
    return b == Backend::cudnn ? cudnn_ops_built() && conv2d_cudnn_supports(m_shape) : Layer::supports(b);
  }

  void forward(const RunContext& rc, const std::vector<const Tensor*>& x, Tensor& y) override {
    Conv2dShape sh = m_shape;
    sh.N = x[0]->shape()[0];
    const float* b = m_bias ? m_params[1].data() : nullptr;
    conv2d_forward(backend(), *rc.exec, sh, x[0]->data(), m_params[0].data(), b, y.data());
  }

  void backward(const RunContext& rc, const std::vector<const Tensor*>& x, const Tensor& y, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    Conv2dShape sh = m_shape;
    sh.N = x[0]->shape()[0];
    float* dxp = dx[0] ? dx[0]->data() : nullptr;
    float* db = m_bias ? m_grads[1].data() : nullptr;
    conv2d_backward(backend(), *rc.exec, sh, x[0]->data(), m_params[0].data(), dy.data(), dxp, m_grads[0].data(), db);
  }

  std::string summary() const override {
    std::string s = fmt::format("{}x{}", m_shape.R, m_shape.S);
    if (m_shape.stride_h != 1 || m_shape.stride_w != 1) s += fmt::format(" s{}", m_shape.stride_h);
    if (m_shape.pad_h || m_shape.pad_w) s += fmt::format(" p{}", m_shape.pad_h);
    if (m_shape.dilation_h != 1) s += fmt::format(" d{}", m_shape.dilation_h);
    if (m_groups != 1) s += m_groups == m_shape.C && m_groups == m_filters ? " dw" : fmt::format(" g{}", m_groups);
    return s;
  }

 private:
  int64_t m_filters = 0;
  std::pair<int64_t, int64_t> m_kernel{1, 1};
  std::pair<int64_t, int64_t> m_stride{1, 1};
  std::pair<int64_t, int64_t> m_padding{0, 0};
  std::pair<int64_t, int64_t> m_dilation{1, 1};
  bool m_same = false;
  int64_t m_groups = 1;
  bool m_bias = true;
  InitKind m_init = InitKind::he_normal;
  Conv2dShape m_shape;
};

}  // namespace

std::unique_ptr<Layer> make_conv2d_layer(const LayerSpec& spec) { return std::make_unique<Conv2dLayer>(spec); }

}  // namespace cnn
