// flatten layer: (C, H, W) -> (C*H*W). A copy, so the planner can treat it like any layer. In bf16,
// f16 and f32cl the input is channels-last and the output takes NCHW order (a permute through the
// convert op), so the features reach a dense layer in the same order in every precision and layout
// and its weights mean the same.
#include "layers/registry.h"
#include "ops/add.h"
#include "ops/convert.h"

namespace cnn {
namespace {

// A copy queued on the context's stream (a synchronous cudaMemcpy would break CUDA graph capture).
void stream_copy(Backend b, const RunContext& rc, const Tensor& src, Tensor& dst) {
  const ConstView one[1] = {src.view()};
  run_op(b, AddForward{rc.exec, dst.numel(), 1, one, dst.view()});
}

class FlattenLayer : public Layer {
 public:
  explicit FlattenLayer(const LayerSpec& spec) : Layer(spec) {}
  Shape infer_shape(const std::vector<Shape>& in) override { return Shape{in[0].numel()}; }
  bool backward_needs_inputs() const override { return false; }
  bool supports(Backend b) const override {
    if (dtype() == DType::f32) return Layer::supports(b);
    return op_supports(b, dtype(), ConvertForward{});  // the permute (or copy) of both directions
  }
  void forward(const RunContext& rc, const std::vector<const Tensor*>& x, Tensor& y) override {
    if (dtype() != DType::f32)  // permute (a copy for a flat input)
      run_op(backend(), ConvertForward{rc.exec, act_dims(x[0]->shape()), x[0]->view(), Layout::nhwc, y.view(), Layout::nchw});
    else
      stream_copy(backend(), rc, *x[0], y);
  }
  void backward(const RunContext& rc, const std::vector<const Tensor*>& x, const Tensor& y, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    if (!dx[0]) return;
    if (dtype() != DType::f32)
      run_op(backend(), ConvertForward{rc.exec, act_dims(dx[0]->shape()), dy.view(), Layout::nchw, dx[0]->view(), Layout::nhwc});
    else
      stream_copy(backend(), rc, dy, *dx[0]);
  }
};

}  // namespace

Schema flatten_schema() { return Schema("flatten", "(C, H, W) -> (C*H*W)"); }

std::unique_ptr<Layer> make_flatten_layer(const LayerSpec& spec) { return std::make_unique<FlattenLayer>(spec); }

}  // namespace cnn
