// conv2d layer: attributes filters, kernel, stride, padding (int, [h, w] or "same"), dilation,
// groups, bias, init. Depthwise is groups == channels; a separable conv is depthwise + 1x1.
// `algo`: auto, one algorithm name for every direction, or {forward, backward_data, backward_filter}
// (conv_plan.h); names are checked here, whether they can run the shape when the device is set up.
// Trap: "same" padding is only exact for odd effective kernels; even ones are rejected.
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <optional>

#include "core/checked.h"
#include "layers/conv_plan.h"
#include "layers/registry.h"
#include "ops/activation.h"
#include "ops/conv2d.h"

namespace cnn {
namespace {

// Checks one requested name of `dir` at its config value: known in this build (in some dtype: the
// autotuner checks it against the layer's dtype), on the layer's backend.
// (The schema declares algo as a string: the names a build has differ, the reference must not.)
void check_algo_name(const Value& at, ConvDir dir, const std::string& name, const std::string& backend) {
  if (name == "auto") return;
  const std::vector<std::string> names = conv2d_algo_names(dir);
  if (std::find(names.begin(), names.end(), name) == names.end())
    at.fail(fmt::format("unknown {} convolution algorithm '{}'{} (expected auto or one of: {})", to_string(dir), name,
                        did_you_mean(name, names), fmt::join(names, ", ")));
  const char* own = "";
  for (const ConvAlgo& a : conv2d_algos(dir))
    if (a.name == name) own = to_string(a.backend);
  if (backend != "auto" && backend != own)
    at.fail(fmt::format("algorithm '{}' runs on backend {}, but the layer asks for backend: {}", name, own, backend));
}

class Conv2dLayer : public Layer, public ConvPlanned {
 public:
  explicit Conv2dLayer(const LayerSpec& spec) : Layer(spec) {
    const Value& a = spec.attrs;
    m_filters = a["filters"].integer();
    m_kernel = a["kernel"].pair();
    m_stride = a["stride"].pair();
    m_dilation = a["dilation"].pair();
    m_same = a["padding"].kind() == Value::Kind::string;  // "same"
    if (!m_same) m_padding = a["padding"].pair();
    m_groups = a["groups"].integer();
    m_bias = a["bias"].boolean();
    m_init = parse_init(a["init"].string());
    read_algo(a["algo"], spec.backend);
  }

  ConvPlanned* conv_planned() override { return this; }
  const ConvPlanned* conv_planned() const override { return this; }
  ConvPlan& conv_plan() override { return m_plan; }
  const ConvPlan& conv_plan() const override { return m_plan; }
  Conv2dShape conv_shape(int64_t batch) const override {
    Conv2dShape sh = m_shape;
    sh.N = batch;
    return sh;
  }
  Conv2dShape conv_shape(int64_t batch, ConvDir d) const override {
    Conv2dShape sh = conv_shape(batch);
    if (m_bias_folded) sh.has_bias = false;  // see backward()
    if (m_fused && d == ConvDir::forward) sh.has_bias = false;  // added with the fused activation
    return sh;
  }
  bool fold_bias(bool on) override {
    // Folding after the gradients were bound (and maybe written): clear the bias's, which the
    // folded backward no longer writes (see backward()).
    if (on && m_bias && !m_bias_folded && m_grads.size() > 1) m_grads[1].zero();
    m_bias_folded = on && m_bias;
    return m_bias;
  }
  // A following activation (Graph::fuse_activations), FP32 only: the forward runs its row without
  // the bias, then one pass adds the bias and applies the activation (BiasActivationForward) where
  // a bias add and the activation layer took two; backward takes dy through act' in place (dy is
  // this layer's own gradient buffer: the fused activation owns none) before the convolution's.
  // The pass runs on our kernels of the layer's device whichever backend its rows run on.
  bool fuse_activation(const ActivationParams* act) override {
    // dtype is f32 until choose_backends sets the precision's; the precision is known from the build.
    const bool fp32 = precision() == Precision::fp32 || precision() == Precision::tf32;
    m_fused = act && activation_fusable(*act) && fp32 && dtype() == DType::f32;
    if (m_fused) m_act = *act;
    return m_fused;
  }
  bool fuses_on_any_backend() const override { return true; }
  bool backward_needs_output() const override { return m_fused; }
  const float* folded_bias() const override {
    return m_bias_folded && m_params.size() > 1 ? m_params[1].data() : nullptr;  // null until bound
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
    // f32cl is a storage choice of tf32 (train.tf32_layout), not the user's precision: a layer whose
    // `algo:` names an algorithm with no f32cl row stays f32 (Graph::choose_backends) and runs it.
    if (dtype() == DType::f32cl)
      for (ConvDir d : kConvDirs) {
        const std::string& name = m_plan.request(d);
        const ConvAlgoList rows = conv2d_algos(d);
        if (name != "auto" && std::none_of(rows.begin(), rows.end(), [&](const ConvAlgo& a) {
              return a.name == name && a.dtype == DType::f32cl;
            }))
          return false;
      }
    return op_supports(b, dtype(), Conv2dForward{nullptr, m_shape, nullptr, nullptr, nullptr, nullptr, math()}) &&
           op_supports(b, dtype(), Conv2dBackwardData{nullptr, m_shape, nullptr, nullptr, nullptr, math()}) &&
           op_supports(b, dtype(), Conv2dBackwardFilter{nullptr, m_shape, nullptr, nullptr, nullptr, nullptr, math()});
  }

  // The 16-bit weight copies the planned rows of forward and backward_data read (16-bit layers on
  // a GPU backend only): one per direction, which the executor may merge when the layouts agree.
  std::vector<WeightPackRequest> weight_pack_requests(int64_t batch, bool input_grad) const override {
    std::vector<WeightPackRequest> out;
    if (!is_16bit(dtype()) || backend() == Backend::cpu) return out;
    const WeightsBf16Dims dims{int(m_shape.K), int(m_shape.C / m_shape.groups), int(m_shape.R), int(m_shape.S)};
    for (ConvDir d : {ConvDir::forward, ConvDir::backward_data}) {
      if (d == ConvDir::backward_data && !input_grad) continue;
      const ConvAlgo* a = planned_row(d);
      const Conv2dShape sh = conv_shape(batch, d);
      if (const std::optional<Bf16WeightLayout> layout = a ? a->packed_layout(sh) : std::nullopt)
        out.push_back({int(d), 0, dims, PackedWeights16{nullptr, dtype(), *layout}});
    }
    return out;
  }
  void bind_weight_packs(const std::vector<WeightPackRequest>& bound) override {
    m_w16 = {};
    for (const WeightPackRequest& r : bound) m_w16.at(size_t(r.use)) = r.copy;
  }

  void forward(const RunContext& rc, const std::vector<const Tensor*>& x, Tensor& y) override {
    // A folded bias is the following batchnorm's mean offset: the forward runs without it.
    const Conv2dShape sh = conv_shape(x[0]->shape()[0], ConvDir::forward);
    const ConstView b = sh.has_bias ? ConstView(m_params[1].view()) : nullptr;
    run_planned(ConvDir::forward, Conv2dForward{rc.exec, sh, x[0]->view(), m_params[0].view(), b, y.view(), math(),
                                                prepacked(rc, ConvDir::forward, sh)});
    if (m_fused) {
      const ConstView fb = m_bias && !m_bias_folded ? ConstView(m_params[1].view()) : nullptr;
      run_op(own_kernels(), BiasActivationForward{rc.exec, m_act, sh.N, sh.K, sh.P * sh.Q, fb, y.view()});
    }
  }

  void backward(const RunContext& rc, const std::vector<const Tensor*>& x, const Tensor& y, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    // A folded bias (the following training batchnorm's mean offset) has a zero gradient: that
    // batchnorm's output does not depend on a per-channel constant added to its input, so its dx
    // sums to zero per channel, and summing it would only measure rounding. The filter gradient
    // runs bias-free and the bias's gradient stays the zeros it was bound with (nothing else
    // writes it), so the bias moves by weight decay alone.
    const Conv2dShape sh = conv_shape(x[0]->shape()[0], ConvDir::backward_filter);
    if (m_fused) {
      Tensor& g = const_cast<Tensor&>(dy);  // this layer's own gradient buffer (see fuse_activation)
      run_op(own_kernels(), ActivationBackwardFromOutput{rc.exec, m_act, g.numel(), y.view(), g.view(), g.view()});
    }
    if (dx[0])
      run_planned(ConvDir::backward_data, Conv2dBackwardData{rc.exec, sh, m_params[0].view(), dy.view(), dx[0]->view(),
                                                             math(), prepacked(rc, ConvDir::backward_data, sh)});
    const View db = sh.has_bias ? m_grads[1].view() : nullptr;
    run_planned(ConvDir::backward_filter,
                Conv2dBackwardFilter{rc.exec, sh, x[0]->view(), dy.view(), m_grads[0].view(), db, math()});
  }

  // The plan's algorithm of direction d when the autotuner (or `algo:`) resolved one, else the
  // default row of the layer's backend.
  template <typename Args>
  void run_planned(ConvDir d, const Args& args) const {
    const ConvAlgo* a = m_plan.algo(d);
    run_op(a ? a->backend : backend(), args, a ? std::string_view(a->name) : std::string_view());
  }
  // The row run_planned runs (null when this build has none).
  const ConvAlgo* planned_row(ConvDir d) const {
    const ConvAlgo* a = m_plan.algo(d);
    return a ? a : find_impl(conv2d_table(d), backend(), dtype());
  }
  // The bound copy of direction d when it is fresh and the row reads that layout at this call's
  // shape (a batch may pick another kernel than the planned one: then the row packs its own).
  PackedWeights16 prepacked(const RunContext& rc, ConvDir d, const Conv2dShape& sh) const {
    const PackedWeights16& p = m_w16[size_t(d)];
    if (!rc.weights_packed || !p.data || p.dtype != dtype()) return {};
    const ConvAlgo* a = planned_row(d);
    return a && a->packed_layout(sh) == p.layout ? p : PackedWeights16{};
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
  // `algo:` one name for every direction, or a map {forward, backward_data, backward_filter}.
  void read_algo(const Value& a, const std::string& backend) {
    for (ConvDir d : kConvDirs) {
      const Value& name = a.is_map() ? a[to_string(d)] : a;
      check_algo_name(name, d, name.string(), backend);
      m_plan.requested[size_t(d)] = name.string();
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
  bool m_bias_folded = false;  // fold_bias: the forward leaves the bias to the following batchnorm
  bool m_fused = false;        // fuse_activation: m_act applied after the forward, with the bias
  ActivationParams m_act;
  InitKind m_init = InitKind::he_normal;
  Conv2dShape m_shape;
  ConvPlan m_plan;
  std::array<PackedWeights16, 2> m_w16{};  // bound copies of forward and backward_data (by ConvDir)
};

}  // namespace

Schema conv2d_schema() {
  Schema s("conv2d", "2-D convolution of (C, H, W) inputs; a separable convolution is a depthwise conv2d, then a 1x1 one");
  const Type size = Type::int_pair(1, kMaxDimension);
  s.key("filters", Type::integer(1, kMaxDimension), "output channels").required();
  s.key("kernel", size, "filter size").required();
  s.key("stride", size, "step between filter positions").defaults_to(1);
  s.key("dilation", size, "spacing between filter taps").defaults_to(1);
  s.key("padding",
        Type::any_of({Type::int_pair(0, kMaxDimension), Type::choice({"same"})})
            .expect("an integer in [0, 1048576], a pair [h, w] of them or 'same'"),
        "zero padding on each side, or `same`: (dilated kernel - 1) / 2, odd kernels only")
      .defaults_to(0);
  s.key("groups", Type::integer(1, kMaxDimension), "channel groups (channels and filters divisible by it); "
                                                   "groups = channels = filters is depthwise")
      .defaults_to(1);
  s.key("bias", Type::boolean(), "add a learned bias").defaults_to(true);
  s.key("init", Type::choice(weight_init_names()), "weight initialiser (He: Kaiming; Xavier: Glorot)").defaults_to("he_normal");
  auto dirs = std::make_shared<Schema>("algo");
  for (ConvDir d : kConvDirs)
    dirs->key(to_string(d), Type::string(true).expect("an algorithm name or auto"), std::string("algorithm of ") + to_string(d))
        .defaults_to("auto");
  s.key("algo",
        Type::any_of({Type::string(true), Type::map(dirs)})
            .expect("an algorithm name, auto, or a map {forward, backward_data, backward_filter}"),
        "`auto` (the autotuner measures), one implementation for every direction (`cpu:im2col_gemm`, "
        "`cuda:implicit_gemm`, `cudnn:<algorithm>`, ...), or a map per direction")
      .defaults_to("auto");
  return s;
}

std::unique_ptr<Layer> make_conv2d_layer(const LayerSpec& spec) { return std::make_unique<Conv2dLayer>(spec); }

}  // namespace cnn
