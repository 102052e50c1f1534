// Pooling layers: maxpool and avgpool (kernel, stride = kernel by default, padding) and
// global_avgpool (whole plane, output (C) so a dense layer can follow without flatten).
#include "layers/registry.h"
#include "ops/cudnn_ops.h"
#include "ops/pool2d.h"

namespace cnn {
namespace {

class PoolLayer : public Layer {
 public:
  explicit PoolLayer(const LayerSpec& spec) : Layer(spec) {
    m_global = type() == "global_avgpool";
    m_kind = type() == "maxpool" ? PoolKind::max : PoolKind::avg;
    if (m_global) return;
    ConfigNode& n = *m_node;
    if (!n.has("kernel")) n.at("kernel");  // throws "missing required key"
    m_kernel = n.get_pair("kernel", m_kernel);
    m_stride = n.get_pair("stride", m_kernel);
    m_padding = n.get_pair("padding", m_padding);
    if (m_kernel.first < 1 || m_kernel.second < 1) n.at("kernel").fail("expected a kernel size >= 1");
    if (m_stride.first < 1 || m_stride.second < 1) n.at("stride").fail("expected stride >= 1");
    if (m_padding.first < 0 || m_padding.second < 0) n.at("padding").fail("expected padding >= 0");
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
    return b == Backend::cudnn ? cudnn_ops_built() && pool2d_cudnn_supports(m_shape) : Layer::supports(b);
  }
  bool backward_needs_output() const override { return m_kind == PoolKind::max; }
  bool backward_needs_inputs() const override { return m_kind == PoolKind::max; }

  void forward(const RunContext& rc, const std::vector<const Tensor*>& x, Tensor& y) override {
    Pool2dShape sh = m_shape;
    sh.N = x[0]->shape()[0];
    pool2d_forward(backend(), *rc.exec, sh, x[0]->data(), y.data());
  }

  void backward(const RunContext& rc, const std::vector<const Tensor*>& x, const Tensor& y, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    if (!dx[0]) return;
    Pool2dShape sh = m_shape;
    sh.N = x[0]->shape()[0];
    pool2d_backward(backend(), *rc.exec, sh, x[0]->data(), y.data(), dy.data(), dx[0]->data());
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

std::unique_ptr<Layer> make_pool_layer(const LayerSpec& spec) { return std::make_unique<PoolLayer>(spec); }

}  // namespace cnn
