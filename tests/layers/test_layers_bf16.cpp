// The element-wise, pooling and merge layers run on bf16 and f16 tensors (BF16 and FP16 training):
// they pass their tensors' views, so the bf16/f16 op rows run, on channels-last storage with the
// logical shapes. On the CPU each 16-bit output must be the f32 layer's output on the same (exact)
// inputs rounded once to that dtype, bit for bit: the emulation's contract (ops/dispatch.h). A layer that read its
// activations as floats (Tensor::data) or sized them as floats would throw or differ here.
#include <string>
#include <vector>

#include "core/bf16.h"
#include "core/exec_context.h"
#include "core/tensor.h"
#include "layers/registry.h"
#include "ops/convert.h"
#include "support/catch.h"
#include "support/test_util.h"

using namespace cnn;
using namespace cnn::test;

namespace {

constexpr int64_t kBatch = 2;

const LayerSpec& spec_of(const std::string& name) {
  static const ModelSpec model = parse_model_text(R"(name: t
input: {channels: 16, height: 6, width: 5}
layers:
  - {name: relu, type: relu}
  - {name: leaky, type: leaky_relu, alpha: 0.125}
  - {name: maxpool, type: maxpool, kernel: 3, stride: 2, padding: 1}
  - {name: avgpool, type: avgpool, kernel: 2, stride: 1}
  - {name: drop, type: dropout, p: 0.25}
  - {name: add, type: add, inputs: [relu, leaky]}
  - {name: cat, type: concat, inputs: [relu, leaky]}
  - {name: gap, type: global_avgpool, inputs: [cat]}
)",
                                                  "t.yaml");
  for (const LayerSpec& s : model.layers)
    if (s.name == name) return s;
  FAIL("no layer " << name);
  return model.layers.front();
}

// Logical (NCHW) index i of a batched shape -> its index in the storage of dtype t; `flat`: the
// values are given and compared in storage order (dropout, whose mask follows the storage index).
size_t storage_index(const Shape& s, DType t, size_t i, bool flat) {
  if (flat || t == DType::f32 || s.rank() != 4) return i;
  const size_t C = size_t(s[1]), HW = size_t(s[2] * s[3]);
  const size_t n = i / (C * HW), c = (i / HW) % C, hw = i % HW;
  return (n * HW + hw) * C + c;
}

Tensor make(const Shape& s, DType t, const std::vector<float>& logical, bool flat) {
  Tensor x = Tensor::empty(s, Device::cpu, "x", t);
  for (size_t i = 0; i < logical.size(); ++i) store_from_float(x.raw(), t, int64_t(storage_index(s, t, i, flat)), logical[i]);
  return x;
}

std::vector<float> logical(const Tensor& x, bool flat) {
  const std::vector<float> stored = x.to_vector();
  std::vector<float> out(stored.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = stored[storage_index(x.shape(), x.dtype(), i, flat)];
  return out;
}

struct Outputs {
  std::vector<float> y;
  std::vector<std::vector<float>> dx;
};

// One forward and backward of the layer on inputs of per-sample shapes `in` (logical values), in dtype t.
Outputs run_layer(const std::string& name, const std::vector<Shape>& in, const std::vector<std::vector<float>>& xs,
                  const std::vector<float>& dy, DType t, bool flat) {
  std::unique_ptr<Layer> layer = LayerRegistry::builtin().create(spec_of(name));
  const Shape out = layer->infer_shape(in).with_batch(kBatch);
  layer->choose_backend(Device::cpu);
  const ExecContext ctx = ExecContext::cpu(2);
  const RunContext rc{&ctx, true, 7, 3};
  std::vector<Tensor> x, dx;
  std::vector<const Tensor*> xp;
  std::vector<Tensor*> dxp;
  for (size_t i = 0; i < in.size(); ++i) {
    x.push_back(make(in[i].with_batch(kBatch), t, xs[i], flat));
    dx.push_back(Tensor::empty(in[i].with_batch(kBatch), Device::cpu, "dx", t));
  }
  for (size_t i = 0; i < in.size(); ++i) {
    xp.push_back(&x[i]);
    dxp.push_back(&dx[i]);
  }
  Tensor y = Tensor::empty(out, Device::cpu, "y", t);
  layer->forward(rc, xp, y);
  layer->backward(rc, xp, y, make(out, t, dy, flat), dxp);
  Outputs o{logical(y, flat), {}};
  for (const Tensor& d : dx) o.dx.push_back(logical(d, flat));
  return o;
}

std::vector<float> rounded(std::vector<float> v, DType t) {
  for (float& f : v) f = round_to(t, f);
  return v;
}

// Runs the layer in f32 and in t (bf16 or f16) on the same t-exact inputs; t's must be f32's
// rounded once.
void check_layer(const std::string& name, const std::vector<Shape>& in, DType t, bool flat = false) {
  INFO("layer " << name << " in " << to_string(t));
  std::vector<std::vector<float>> xs;
  uint64_t seed = 11;
  for (const Shape& s : in) {
    std::vector<float> v = rounded(random_floats(size_t(s.with_batch(kBatch).numel()), ++seed, -2.0f, 2.0f), t);
    if (seed % 2)  // ties in the max windows
      for (float& f : v) f = float(int(f * 2.0f)) / 2.0f;
    xs.push_back(v);
  }
  std::unique_ptr<Layer> probe = LayerRegistry::builtin().create(spec_of(name));
  const int64_t out_numel = probe->infer_shape(in).with_batch(kBatch).numel();
  const std::vector<float> dy = rounded(random_floats(size_t(out_numel), 99), t);
  const Outputs f32 = run_layer(name, in, xs, dy, DType::f32, flat);
  const Outputs b16 = run_layer(name, in, xs, dy, t, flat);
  CHECK(b16.y == rounded(f32.y, t));
  REQUIRE(b16.dx.size() == f32.dx.size());
  for (size_t i = 0; i < f32.dx.size(); ++i) CHECK(b16.dx[i] == rounded(f32.dx[i], t));
}

}  // namespace

TEST_CASE("activation, pooling, dropout, add and concat layers run on bf16 and f16 tensors", "[cpu]") {
  const Shape chw{16, 6, 5};
  for (DType t : {DType::bf16, DType::f16}) {
    // relu and leaky_relu: backward reads x only, so f32 and the 16-bit run see the same operands.
    for (const char* name : {"relu", "leaky", "maxpool", "avgpool", "gap"}) check_layer(name, {chw}, t);
    check_layer("drop", {chw}, t, true);
    check_layer("add", {chw, chw}, t);
    check_layer("cat", {Shape{8, 6, 5}, chw}, t);
  }
}
