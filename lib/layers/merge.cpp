// Layers with several inputs: add (equal shapes, residual connections) and concat (along
// channels of (C, H, W) inputs with equal H, W). Inputs are named with `inputs: [a, b]`.
#include "layers/registry.h"
#include "ops/add.h"
#include "ops/concat.h"

namespace cnn {
namespace {

// The operand views of the inputs (outputs: null where no gradient is wanted).
std::vector<ConstView> views_of(const std::vector<const Tensor*>& ts) {
  std::vector<ConstView> v;
  for (const Tensor* t : ts) v.push_back(t->view());
  return v;
}
std::vector<View> views_of(const std::vector<Tensor*>& ts) {
  std::vector<View> v;
  for (Tensor* t : ts) v.push_back(t ? t->view() : nullptr);
  return v;
}

class AddLayer : public Layer {
 public:
  bool supports(Backend b) const override {
    return op_supports(b, dtype(), AddForward{}) && op_supports(b, dtype(), AddBackward{});
  }
  explicit AddLayer(const LayerSpec& spec) : Layer(spec) {}
  int min_inputs() const override { return 2; }
  int max_inputs() const override { return 64; }
  bool backward_needs_inputs() const override { return false; }
  Shape infer_shape(const std::vector<Shape>& in) override {
    for (size_t i = 1; i < in.size(); ++i) {
      if (in[i] != in[0])
        fail(fmt::format("input {} has shape {} but input 0 has {}: add needs equal shapes", i, in[i].to_string(),
                         in[0].to_string()));
    }
    m_numel = in[0].numel();
    return in[0];
  }
  double forward_flops() const override { return double(m_numel); }
  double backward_flops() const override { return 0.0; }

  void forward(const RunContext& rc, const std::vector<const Tensor*>& x, Tensor& y) override {
    run_op(backend(), AddForward{rc.exec, y.numel(), int(x.size()), views_of(x).data(), y.view()});
  }
  void backward(const RunContext& rc, const std::vector<const Tensor*>& x, const Tensor& y, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    run_op(backend(), AddBackward{rc.exec, dy.numel(), int(dx.size()), dy.view(), views_of(dx).data()});
  }

 private:
  int64_t m_numel = 0;
};

class ConcatLayer : public Layer {
 public:
  bool supports(Backend b) const override {
    return op_supports(b, dtype(), ConcatForward{}) && op_supports(b, dtype(), ConcatBackward{});
  }
  explicit ConcatLayer(const LayerSpec& spec) : Layer(spec) {}
  int min_inputs() const override { return 2; }
  int max_inputs() const override { return 64; }
  bool backward_needs_inputs() const override { return false; }
  Shape infer_shape(const std::vector<Shape>& in) override {
    m_channels.clear();
    for (size_t i = 0; i < in.size(); ++i) {
      expect_rank(in[i], 3, "(C, H, W)");
      if (in[i][1] != in[0][1] || in[i][2] != in[0][2])
        fail(fmt::format("input {} is {} but input 0 is {}: concat needs equal H and W", i, in[i].to_string(),
                         in[0].to_string()));
      m_channels.push_back(in[i][0]);
    }
    m_hw = in[0][1] * in[0][2];
    int64_t c = 0;
    for (int64_t ci : m_channels) c += ci;
    return Shape{c, in[0][1], in[0][2]};
  }

  ConcatShape shape_for(const Tensor& y) const { return ConcatShape{y.shape()[0], m_hw, m_channels}; }

  void forward(const RunContext& rc, const std::vector<const Tensor*>& x, Tensor& y) override {
    run_op(backend(), ConcatForward{rc.exec, shape_for(y), views_of(x).data(), y.view()});
  }
  void backward(const RunContext& rc, const std::vector<const Tensor*>& x, const Tensor& y, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    run_op(backend(), ConcatBackward{rc.exec, shape_for(dy), dy.view(), views_of(dx).data()});
  }

 private:
  std::vector<int64_t> m_channels;
  int64_t m_hw = 1;
};

}  // namespace

Schema add_schema() { return Schema("add", "sum of 2 to 64 inputs of equal shape (residual connections)"); }
Schema concat_schema() {
  return Schema("concat", "2 to 64 (C, H, W) inputs of equal H and W joined along channels");
}

std::unique_ptr<Layer> make_add_layer(const LayerSpec& spec) { return std::make_unique<AddLayer>(spec); }
std::unique_ptr<Layer> make_concat_layer(const LayerSpec& spec) { return std::make_unique<ConcatLayer>(spec); }

}  // namespace cnn
