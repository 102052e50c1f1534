// Pooling layers: maxpool and avgpool (kernel, stride = kernel by default, padding) and
// global_avgpool (whole plane, output (C) so a dense layer can follow without flatten).
#include "layers/registry.h"
#include "ops/pool2d.h"

namespace cnn {
namespace {

class PoolLayer : public Layer {
 public:
  explicit PoolLayer(const LayerSpec& spec) : Layer(spec) {
    m_global = type() == "global_avgpool";
    m_kind = type() == "maxpool" ? PoolKind::max : PoolKind::avg;
    if (m_global) return;
    m_kernel = spec.attrs["kernel"].pair();
    m_stride = spec.attrs["stride"].pair();
    m_padding = spec.attrs["padding"].pair();
  }

  Shape infer_shape(const std::vector<Shape>& in) override {
    expect_rank(in[0], 3, "a (C, H, W)");
    int64_t C = in[0][0], H = in[0][1], W = in[0][2];
    std::pair<int64_t, int64_t> k = m_global ? std::pair{H, W} : m_kernel;
    std::pair<int64_t, int64_t> s = m_global ? std::pair{H, W} : m_stride;
    try {
      m_shape = Pool2dShape::make(m_kind, 1, C, H, W, k.first, k.second, s.first, s.second, m_padding.first,
                                  m_padding.second);
    } catch (const Error& e) {
      fail(fmt::format("input {} does not fit: {}", in[0].to_string(), e.what()));
    }
    if (m_global) return Shape{C};
    return Shape{C, m_shape.P, m_shape.Q};
  }

  double forward_flops() const override { return m_shape.flops_forward(); }
  double backward_flops() const override { return m_shape.flops_forward(); }
  bool supports(Backend b) const override {
    return op_supports(b, dtype(), Pool2dForward{nullptr, m_shape}) &&
           op_supports(b, dtype(), Pool2dBackward{nullptr, m_shape});
  }
  bool backward_needs_output() const override { return m_kind == PoolKind::max; }
  bool backward_needs_inputs() const override { return m_kind == PoolKind::max; }

  void forward(const RunContext& rc, const std::vector<const Tensor*>& x, Tensor& y) override {
    Pool2dShape sh = m_shape;
    sh.N = x[0]->shape()[0];
    run_op(backend(), Pool2dForward{rc.exec, sh, x[0]->view(), y.view()});
  }

  void backward(const RunContext& rc, const std::vector<const Tensor*>& x, const Tensor& y, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    if (!dx[0]) return;
    Pool2dShape sh = m_shape;
    sh.N = x[0]->shape()[0];
    run_op(backend(), Pool2dBackward{rc.exec, sh, x[0]->view(), y.view(), dy.view(), dx[0]->view()});
  }

  std::string summary() const override {
    if (m_global) return "global";
    std::string s = fmt::format("{}x{} s{}", m_shape.R, m_shape.S, m_shape.stride_h);
    if (m_shape.pad_h) s += fmt::format(" p{}", m_shape.pad_h);
    return s;
  }

 private:
  bool m_global = false;
  PoolKind m_kind = PoolKind::max;
  std::pair<int64_t, int64_t> m_kernel{1, 1};
  std::pair<int64_t, int64_t> m_stride{1, 1};
  std::pair<int64_t, int64_t> m_padding{0, 0};
  Pool2dShape m_shape;
};

}  // namespace

Schema pool_schema(const std::string& type) {
  if (type == "global_avgpool") return Schema(type, "average of each plane: (C, H, W) -> (C), so dense may follow");
  CNN_CHECK(type == "maxpool" || type == "avgpool", "no pooling type '{}'", type);
  Schema s(type, type == "maxpool" ? "maximum over each window" : "average over each window (padding not counted)");
  s.key("kernel", Type::int_pair(1, kMaxDimension), "window size").required();
  s.key("stride", Type::int_pair(1, kMaxDimension), "step between windows").defaults_to_sibling("kernel");
  s.key("padding", Type::int_pair(0, kMaxDimension), "padding on each side (left out of the max and the average)")
      .defaults_to(0);
  return s;
}

std::unique_ptr<Layer> make_pool_layer(const LayerSpec& spec) { return std::make_unique<PoolLayer>(spec); }

}  // namespace cnn
