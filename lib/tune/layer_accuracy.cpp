// A layer's cuDNN implementation against our own on probe operands (see layer_accuracy.h).
#include "tune/layer_accuracy.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "tune/conv_accuracy.h"

namespace cnn {
namespace {

constexpr int kSets = 2;

// Every output of one training forward + backward, named.
struct Outputs {
  std::vector<std::string> names;
  std::vector<std::vector<float>> values;
  void add(std::string name, std::vector<float> v) {
    names.push_back(std::move(name));
    values.push_back(std::move(v));
  }
};

// x of set `set` for a per-sample shape (C, ...) at `batch`: N(0,1), plus 4 * (c mod 3) in set 1.
std::vector<float> probe_input(const Shape& per_sample, int64_t batch, int set, uint64_t seed) {
  std::vector<float> v = probe_normals(per_sample.numel() * batch, 1.0f, seed);
  if (set == 1 && per_sample.rank() > 0) {
    const int64_t C = per_sample[0], inner = per_sample.numel() / C;
    for (size_t i = 0; i < v.size(); ++i) v[i] += 4.0f * float((int64_t(i) / inner % C) % 3);
  }
  return v;
}

Outputs run_once(Graph& graph, int index, const ExecContext& ctx, int64_t batch, Backend backend, int set) {
  GraphNode& node = graph.node(index);
  Layer& l = *node.layer;
  const Device dev = ctx.device;
  std::vector<Tensor> params, grads, xs, dxs;
  const std::vector<ParamInfo> infos = l.params();
  uint64_t seed = 1000;
  for (const ParamInfo& p : infos) {
    std::vector<float> v = probe_normals(p.shape.numel(), 0.1f, seed++);
    if (p.init.kind == InitKind::ones)
      for (float& f : v) f += 1.0f;
    params.push_back(probe_upload(v, p.shape, dev));
    grads.push_back(p.trainable ? Tensor::zeros(p.shape, dev, "accuracy probe grad") : Tensor());
  }
  for (int in : node.inputs) {
    const Shape s = in == Graph::kModelInput ? graph.input_shape() : graph.node(in).out_shape;
    xs.push_back(probe_upload(probe_input(s, batch, set, seed++), s.with_batch(batch), dev));
    dxs.push_back(Tensor::zeros(s.with_batch(batch), dev, "accuracy probe dx"));
  }
  const Shape out = node.out_shape.with_batch(batch);
  Tensor y = Tensor::zeros(out, dev, "accuracy probe y");
  std::vector<float> hdy = probe_normals(out.numel(), 1.0f, seed++);
  if (set == 1)
    for (float& f : hdy) f = std::ldexp(f, -17);
  Tensor dy = probe_upload(hdy, out, dev);

  const Backend before = l.backend();
  const std::string note = l.backend_note();
  l.set_backend(backend, "accuracy probe");
  Outputs o;
  try {
    l.bind(params, grads);
    l.prepare(batch, dev);
    std::vector<const Tensor*> xp;
    std::vector<Tensor*> dxp;
    for (size_t i = 0; i < xs.size(); ++i) xp.push_back(&xs[i]), dxp.push_back(&dxs[i]);
    RunContext rc;
    rc.exec = &ctx;
    rc.training = true;
    l.forward(rc, xp, y);
    l.backward(rc, xp, y, dy, dxp);
    o.add("y", probe_download(y));
    for (size_t i = 0; i < dxs.size(); ++i) o.add(dxs.size() == 1 ? "dx" : fmt::format("dx{}", i), probe_download(dxs[i]));
    for (size_t k = 0; k < infos.size(); ++k) {
      if (infos[k].trainable) o.add("grad " + infos[k].name, probe_download(grads[k]));
      else o.add(infos[k].name, probe_download(params[k]));  // buffers the forward updated
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
    const Outputs ref = run_once(graph, index, ctx, batch, reference, set);
    const Outputs got = run_once(graph, index, ctx, batch, candidate, set);
    CNN_CHECK(ref.names == got.names, "layer '{}': the accuracy probe's outputs differ between backends", l.name());
    for (size_t i = 0; i < ref.values.size(); ++i) {
      const double e = relative_l2(got.values[i], ref.values[i]);
      if (std::isnan(e)) return LayerAccuracy{e, ref.names[i]};
      if (worst.worst.empty() || e > worst.rel_err) worst = {e, ref.names[i]};
    }
  }
  return worst;
}

}  // namespace cnn
