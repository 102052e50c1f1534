// dropout layer (p, default 0.5): identity in evaluation. The mask is recomputed in backward
// from (seed, offset), where offset is unique per step; layers differ by their seed.
#include "layers/registry.h"
#include "ops/add.h"
#include "ops/dropout.h"

namespace cnn {
namespace {

// A copy queued on the context's stream (a synchronous cudaMemcpy would break CUDA graph capture).
void stream_copy(Backend b, const RunContext& rc, const Tensor& src, Tensor& dst) {
  const ConstView one[1] = {src.view()};
  run_op(b, AddForward{rc.exec, dst.numel(), 1, one, dst.view()});
}

class DropoutLayer : public Layer {
 public:
  bool supports(Backend b) const override {  // the copy of evaluation mode included
    return op_supports(b, dtype(), DropoutForward{}) && op_supports(b, dtype(), DropoutBackward{}) &&
           op_supports(b, dtype(), AddForward{});
  }
  explicit DropoutLayer(const LayerSpec& spec) : Layer(spec) {
    m_p = spec.attrs["p"].real();
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : name()) h = (h ^ c) * 1099511628211ull;
    m_salt = h;
  }

  Shape infer_shape(const std::vector<Shape>& in) override { return in[0]; }
  bool backward_needs_inputs() const override { return false; }

  DropoutParams params_for(const RunContext& rc) const {
    if (rc.device_seed_step) return DropoutParams{float(m_p), m_salt, 0, rc.device_seed_step};
    return DropoutParams{float(m_p), rc.seed ^ m_salt, rc.step << 32};
  }

  void forward(const RunContext& rc, const std::vector<const Tensor*>& x, Tensor& y) override {
    int64_t n = x[0]->numel();
    if (!rc.training || m_p == 0.0) {
      stream_copy(backend(), rc, *x[0], y);
      return;
    }
    run_op(backend(), DropoutForward{rc.exec, params_for(rc), n, x[0]->view(), y.view()});
  }

  void backward(const RunContext& rc, const std::vector<const Tensor*>& x, const Tensor& y, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    if (!dx[0]) return;
    if (!rc.training || m_p == 0.0) {
      stream_copy(backend(), rc, dy, *dx[0]);
      return;
    }
    run_op(backend(), DropoutBackward{rc.exec, params_for(rc), dy.numel(), dy.view(), dx[0]->view()});
  }

  std::string summary() const override { return fmt::format("p {}", m_p); }

 private:
  double m_p = 0;
  uint64_t m_salt = 0;
};

}  // namespace

Schema dropout_schema() {
  Schema s("dropout", "zeroes each value with probability p in training (the rest scaled by 1/(1-p)); identity in evaluation");
  s.key("p", Type::real(0.0, 1.0, false, true), "drop probability").defaults_to(0.5);
  return s;
}

std::unique_ptr<Layer> make_dropout_layer(const LayerSpec& spec) { return std::make_unique<DropoutLayer>(spec); }

}  // namespace cnn
