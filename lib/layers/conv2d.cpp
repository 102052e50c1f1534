// conv2d layer: attributes filters, kernel, stride, padding (int, [h, w] or "same"), dilation,
// groups, bias, init. Depthwise is groups == channels; a separable conv is depthwise + 1x1.
// `algo`: auto, one algorithm name for every direction, or {forward, backward_data, backward_filter}
// (conv_plan.h); names are checked here, whether they can run the shape when the device is set up.
// Trap: "same" padding is only exact for odd effective kernels; even ones are rejected.
#include <fmt/ranges.h>

#include <algorithm>

#include "core/checked.h"
#include "layers/conv_plan.h"
#include "layers/registry.h"
#include "ops/conv2d.h"
#include "ops/cudnn_ops.h"

namespace cnn {
namespace {

// Checks one requested name of `dir` at its config node: known in this build, on the layer's backend.
void check_algo_name(ConfigNode& at, ConvDir dir, const std::string& name, const std::string& backend) {
  if (name == "auto") return;
  std::vector<std::string> names;
  for (const ConvAlgo& a : conv2d_algos(dir)) names.push_back(a.name);
  if (std::find(names.begin(), names.end(), name) == names.end())
    at.fail(fmt::format("unknown {} convolution algorithm '{}'{} (expected auto or one of: {})", to_string(dir), name,
                        did_you_mean(name, names), fmt::join(names, ", ")));
  const char* own = to_string(conv2d_algo(dir, name).backend);
  if (backend != "auto" && backend != own)
    at.fail(fmt::format("algorithm '{}' runs on backend {}, but the layer asks for backend: {}", name, own, backend));
}

class Conv2dLayer : public Layer, public ConvPlanned {
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
    read_algo(n, spec.backend);
  }

  ConvPlan& conv_plan() override { return m_plan; }
  const ConvPlan& conv_plan() const override { return m_plan; }
  Conv2dShape conv_shape(int64_t batch) const override {
    Conv2dShape sh = m_shape;
    sh.N = batch;
    return sh;
  }

  Shape infer_shape(const std::vector<Shape>& in) override {
    expect_rank(in[0], 3, "a (C, H, W)");
    int64_t C = in[0][0], H = in[0][1], W = in[0][2];
    if (m_same) {
      const Checked eh = Checked(m_dilation.first) * (m_kernel.first - 1);
      const Checked ew = Checked(m_dilation.second) * (m_kernel.second - 1);
      if (!eh.ok() || !ew.ok())
        fail(fmt::format("padding 'same': dilation {}x{} times (kernel {}x{} - 1) does not fit a 64-bit integer",
                         m_dilation.first, m_dilation.second, m_kernel.first, m_kernel.second));
      if (eh.value("") % 2 || ew.value("") % 2) fail("padding 'same' needs an odd (dilated) kernel size");
      m_padding = {eh.value("") / 2, ew.value("") / 2};
    }
    if (C % m_groups != 0) fail(fmt::format("input has {} channels, not divisible by groups {}", C, m_groups));
    if (m_filters % m_groups != 0) fail(fmt::format("filters {} not divisible by groups {}", m_filters, m_groups));
    try {
      m_shape = Conv2dShape::make(1, C, H, W, m_filters, m_kernel.first, m_kernel.second, m_stride.first,
                                  m_stride.second, m_padding.first, m_padding.second, m_dilation.first,
                                  m_dilation.second, m_groups, m_bias);
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
    const Conv2dShape sh = conv_shape(x[0]->shape()[0]);
    const float* b = m_bias ? m_params[1].data() : nullptr;
    if (const ConvAlgo* a = m_plan.algo(ConvDir::forward)) {
      ConvOperands op;
      op.x = x[0]->data(), op.w = m_params[0].data(), op.b = b, op.y = y.data();
      a->run(*rc.exec, sh, op);
      return;
    }
    conv2d_forward(backend(), *rc.exec, sh, x[0]->data(), m_params[0].data(), b, y.data());
  }

  void backward(const RunContext& rc, const std::vector<const Tensor*>& x, const Tensor& y, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    const Conv2dShape sh = conv_shape(x[0]->shape()[0]);
    float* dxp = dx[0] ? dx[0]->data() : nullptr;
    float* db = m_bias ? m_grads[1].data() : nullptr;
    const ConvAlgo* data_algo = m_plan.algo(ConvDir::backward_data);
    const ConvAlgo* filter_algo = m_plan.algo(ConvDir::backward_filter);
    if (!data_algo && !filter_algo) {
      conv2d_backward(backend(), *rc.exec, sh, x[0]->data(), m_params[0].data(), dy.data(), dxp, m_grads[0].data(), db);
      return;
    }
    ConvOperands op;
    op.x = x[0]->data(), op.w = m_params[0].data(), op.dy = dy.data();
    op.dx = dxp, op.dw = m_grads[0].data(), op.db = db;
    if (dxp && data_algo) data_algo->run(*rc.exec, sh, ConvOperands{nullptr, op.w, nullptr, nullptr, op.dy, dxp});
    if (dxp && !data_algo)
      conv2d_backward(backend(), *rc.exec, sh, op.x, op.w, op.dy, dxp, nullptr, nullptr);
    if (filter_algo)
      filter_algo->run(*rc.exec, sh, ConvOperands{op.x, nullptr, nullptr, nullptr, op.dy, nullptr, op.dw, db});
    else
      conv2d_backward(backend(), *rc.exec, sh, op.x, op.w, op.dy, nullptr, op.dw, db);
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
  // `algo:` was read as a string or map by the model spec; a map is read (strictly) here.
  void read_algo(ConfigNode& n, const std::string& backend) {
    ConfigNode* a = n.find("algo");
    if (a == nullptr || a->is_null()) return;
    if (a->is_map()) {
      for (ConvDir d : kConvDirs) {
        m_plan.requested[size_t(d)] = a->get<std::string>(to_string(d), "auto");
        check_algo_name(a->at(to_string(d)), d, m_plan.request(d), backend);
      }
      a->check_unknown_keys();
      return;
    }
    const std::string name = a->as_string();
    for (ConvDir d : kConvDirs) {
      check_algo_name(*a, d, name, backend);
      m_plan.requested[size_t(d)] = name;
    }
  }

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
  ConvPlan m_plan;
};

}  // namespace

std::unique_ptr<Layer> make_conv2d_layer(const LayerSpec& spec) { return std::make_unique<Conv2dLayer>(spec); }

}  // namespace cnn
