// flatten layer: (C, H, W) -> (C*H*W). A copy, so the planner can treat it like any layer.
#include "layers/registry.h"

namespace cnn {
namespace {

class FlattenLayer : public Layer {
 public:
  explicit FlattenLayer(const LayerSpec& spec) : Layer(spec) {}
  Shape infer_shape(const std::vector<Shape>& in) override { return Shape{in[0].numel()}; }
  bool backward_needs_inputs() const override { return false; }
  void forward(const RunContext& rc, const std::vector<const Tensor*>& x, Tensor& y) override { y.copy_from(*x[0]); }
  void backward(const RunContext& rc, const std::vector<const Tensor*>& x, const Tensor& y, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    if (dx[0]) dx[0]->copy_from(dy);
  }
};

}  // namespace

std::unique_ptr<Layer> make_flatten_layer(const LayerSpec& spec) { return std::make_unique<FlattenLayer>(spec); }

}  // namespace cnn
