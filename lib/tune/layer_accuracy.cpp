// A layer's cuDNN implementation against our own on probe operands (see layer_accuracy.h).
#include "tune/layer_accuracy.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "tune/probe_operands.h"

namespace cnn {
namespace {

constexpr int kSets = 2;

// Every output of one training forward + backward, named, where the layer wrote it (on a GPU
// they stay there and are compared there).
struct Outputs {
  std::vector<std::string> names;
  std::vector<Tensor> values;
  void add(std::string name, Tensor v) {
    names.push_back(std::move(name));
    values.push_back(std::move(v));
  }
};

// One operand set, made once and read by both backends: the parameters on the host (tiny; the
// forward updates buffers such as running statistics, so each run uploads them afresh), x and dy
// made on the context's device (the layer only reads them).
struct SetOperands {
  std::vector<std::vector<float>> params;
  std::vector<Tensor> xs;
  Tensor dy;
};

SetOperands make_operands(Graph& graph, int index, const ExecContext& ctx, int64_t batch, int set) {
  const GraphNode& node = graph.node(index);
  SetOperands o;
  uint64_t seed = 1000;
  for (const ParamInfo& p : node.layer->params()) {
    std::vector<float> v = probe_normals(p.shape.numel(), 0.1f, seed++, ctx.threads());
    if (p.init.kind == InitKind::ones)
      for (float& f : v) f += 1.0f;
    o.params.push_back(std::move(v));
  }
  for (int in : node.inputs) {
    const Shape s = in == Graph::kModelInput ? graph.input_shape() : graph.node(in).out_shape;
    ProbeFill x;  // N(0,1), plus 4 * (c mod 3) in set 1
    x.seed = seed++;
    x.channel_step = set == 1 ? 4.0f : 0.0f;
    o.xs.push_back(probe_tensor(ctx, s.with_batch(batch), x));
  }
  ProbeFill dy;  // N(0,1); 2^-17 N(0,1) in set 1
  dy.seed = seed++;
  dy.scale = set == 1 ? std::ldexp(1.0f, -17) : 1.0f;
  o.dy = probe_tensor(ctx, node.out_shape.with_batch(batch), dy);
  return o;
}

Outputs run_once(Graph& graph, int index, const ExecContext& ctx, int64_t batch, Backend backend,
                 const SetOperands& ops) {
  GraphNode& node = graph.node(index);
  Layer& l = *node.layer;
  const Device dev = ctx.device;
  std::vector<Tensor> params, grads, dxs;
  const std::vector<ParamInfo> infos = l.params();
  for (size_t k = 0; k < infos.size(); ++k) {
    params.push_back(probe_upload(ops.params[k], infos[k].shape, dev));
    grads.push_back(infos[k].trainable ? Tensor::zeros(infos[k].shape, dev, "accuracy probe grad") : Tensor());
  }
  for (const Tensor& x : ops.xs) dxs.push_back(Tensor::zeros(x.shape(), dev, "accuracy probe dx"));
  Tensor y = Tensor::zeros(node.out_shape.with_batch(batch), dev, "accuracy probe y");

  const Backend before = l.backend();
  const std::string note = l.backend_note();
  l.set_backend(backend, "accuracy probe");
  Outputs o;
  try {
    l.bind(params, grads);
    l.prepare(batch, dev);
    std::vector<const Tensor*> xp;
    std::vector<Tensor*> dxp;
    for (size_t i = 0; i < ops.xs.size(); ++i) xp.push_back(&ops.xs[i]), dxp.push_back(&dxs[i]);
    RunContext rc;
    rc.exec = &ctx;
    rc.training = true;
    l.forward(rc, xp, y);
    l.backward(rc, xp, y, ops.dy, dxp);
    o.add("y", y);
    for (size_t i = 0; i < dxs.size(); ++i) o.add(dxs.size() == 1 ? "dx" : fmt::format("dx{}", i), dxs[i]);
    for (size_t k = 0; k < infos.size(); ++k) {
      if (infos[k].trainable) o.add("grad " + infos[k].name, grads[k]);
      else o.add(infos[k].name, params[k]);  // buffers the forward updated
    }
  } catch (...) {
    l.set_backend(before, note);
    throw;
  }
  l.set_backend(before, note);
  return o;
}

}  // namespace

std::optional<LayerAccuracy> layer_backend_error(Graph& graph, int index, const ExecContext& ctx, int64_t batch,
                                                 Backend candidate, Backend reference) {
  Layer& l = *graph.node(index).layer;
  if (!l.supports(reference)) return std::nullopt;
  LayerAccuracy worst;
  for (int set = 0; set < kSets; ++set) {
    const SetOperands ops = make_operands(graph, index, ctx, batch, set);
    const Outputs ref = run_once(graph, index, ctx, batch, reference, ops);
    const Outputs got = run_once(graph, index, ctx, batch, candidate, ops);
    CNN_CHECK(ref.names == got.names, "layer '{}': the accuracy probe's outputs differ between backends", l.name());
    for (size_t i = 0; i < ref.values.size(); ++i) {
      const double e = relative_l2(l2_sums(ctx, got.values[i], ref.values[i]));
      if (std::isnan(e)) return LayerAccuracy{e, ref.names[i]};
      if (worst.worst.empty() || e > worst.rel_err) worst = {e, ref.names[i]};
    }
  }
  return worst;
}

}  // namespace cnn
