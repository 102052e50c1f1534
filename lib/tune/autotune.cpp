// The autotuner (see autotune.h): the walk over the graph, each conv direction and each measured
// backend; one decision among candidates is in tune_choice.cpp, the decisions as text in
// autotune_decisions.cpp.
#include "tune/autotune.h"

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <memory>
#include <optional>

#include "core/error.h"
#include "core/tensor.h"
#include "graph/timer.h"
#include "layers/conv_plan.h"
#include "tune/layer_accuracy.h"
#include "tune/probe_operands.h"

namespace cnn {

AutotuneOptions AutotuneOptions::from_spec(const AutotuneSpec& spec) {
  AutotuneOptions o;
  o.cache_path = resolve_autotune_cache_path(spec.cache);
  o.workspace_limit_bytes = size_t(spec.workspace_mb) << 20;
  if (spec.tolerance > 0) {
    o.tolerance = spec.tolerance;
    o.tolerance_given = true;
  }
  return o;
}

namespace {

// Scratch on ctx's device, uniform in [-0.5, 0.5) (zeros or garbage could take other paths), in
// dtype (f32, bf16 or f16: random values need no particular layout); made on the device on a GPU.
Tensor scratch(const ExecContext& ctx, const Shape& shape, uint64_t seed, DType dtype = DType::f32) {
  ProbeFill f;
  f.seed = seed;
  f.normal = false;
  f.lo = -0.5f;
  return probe_tensor(ctx, shape, f, dtype);
}

double time_ms(const ExecContext& ctx, const AutotuneOptions& opt, const std::function<void()>& run) {
  return median_ms(ctx, opt.warmup, std::max(1, opt.repeats), run);
}

std::vector<Backend> allowed_backends(const Layer& layer, Device device) {
  if (device == Device::cpu) return {Backend::cpu};
  const std::string& req = layer.requested_backend();
  if (req == "cuda") return {Backend::cuda};
  if (req == "cudnn") return {Backend::cudnn};
  return {Backend::cuda, Backend::cudnn};
}

bool allowed(const std::vector<Backend>& bs, Backend b) { return std::find(bs.begin(), bs.end(), b) != bs.end(); }

ConfigError layer_error(const Layer& l, const std::string& message) {
  return ConfigError(l.where(), fmt::format("layers.{}.algo", l.name()),
                     fmt::format("layer '{}' ({}): {}", l.name(), l.type(), message));
}

ConfigError backend_error(const Layer& l, const std::string& message) {
  return ConfigError(l.where(), fmt::format("layers.{}.backend", l.name()),
                     fmt::format("layer '{}' ({}): {}", l.name(), l.type(), message));
}

struct Tuner {
  Graph& graph;
  const ExecContext& ctx;
  int64_t batch;
  const AutotuneOptions& opt;
  AutotuneCache cache;
  std::string env = autotune_environment_key();
  std::vector<std::string> lines;
  AutotuneStats stats;

  void count(const TuneOutcome& r, size_t candidates) {
    if (r.from_cache) ++stats.cache_hits;
    else if (candidates > 1) ++stats.timed;
    else ++stats.untimed;
  }

  void log(const std::string& line) {
    spdlog::info("autotune: {}", line);
    lines.push_back(line);
  }

  // An explicit name: it must exist for the layer's dtype and run here, on an allowed backend.
  const ConvAlgo& explicit_algo(const Layer& l, ConvDir d, const std::string& name, const Conv2dShape& sh,
                                const std::vector<Backend>& backends) {
    const ConvAlgo* found = nullptr;
    try {
      found = &conv2d_algo(d, name, l.dtype());
    } catch (const Error& e) {
      throw layer_error(l, e.what());
    }
    const ConvAlgo& a = *found;
    // Asked only for an error: every row's can_implement is a cuDNN query for cuDNN's rows.
    auto alternatives = [&] {
      std::vector<std::string> can;
      for (const ConvAlgo& c : conv2d_algos(d))
        if (c.dtype == l.dtype() && allowed(backends, c.backend) && c.can_implement(ctx, sh, l.math()))
          can.push_back(c.name);
      return can.empty() ? std::string("none") : fmt::format("{}", fmt::join(can, ", "));
    };
    if (!allowed(backends, a.backend))
      throw layer_error(l, fmt::format("algo '{}' for {} cannot run on device {} (algorithms that can: {})", name,
                                       to_string(d), to_string(ctx.device), alternatives()));
    if (!a.can_implement(ctx, sh, l.math()))
      throw layer_error(l, fmt::format("algo '{}' cannot implement {} of {} (algorithms that can: {})", name,
                                       to_string(d), sh.to_string(), alternatives()));
    return a;
  }

  // The tolerance of a conv candidate of activation dtype `dtype` that multiplies in `math`
  // (ConvAlgo::dtype, ConvAlgo::math_used): FP32 ones opt.tolerance, TF32 ones
  // kTf32AccuracyTolerance, bf16 and f16 ones their own, unless the user gave a tolerance,
  // which then replaces every one (accuracy_tolerance.h).
  double conv_candidate_tolerance(DType dtype, MathMode math) const {
    const bool plain = dtype == DType::f32 && math == MathMode::fp32;
    return plain || opt.tolerance_given ? opt.tolerance : conv_tolerance(dtype, math);
  }

  // The tolerance of a non-conv layer's cuDNN implementation (accuracy_tolerance.h).
  double layer_tolerance(const Layer& l) const {
    return opt.tolerance_given ? opt.tolerance : cudnn_layer_tolerance(l.type());
  }

  // Tunes the conv plan; when only cuDNN was allowed and none of its algorithms is accurate, a
  // layer's own `backend: cudnn` is a config error and train.backend cudnn is refused for our kernels.
  void tune_conv(Layer& l, ConvPlanned& planned) {
    const std::vector<Backend> backends = allowed_backends(l, ctx.device);
    try {
      tune_conv_on(l, planned, backends);
    } catch (const NoAccurateCandidate& e) {
      if (backends != std::vector<Backend>{Backend::cudnn}) throw;
      if (!l.backend_from_train() || !l.supports(Backend::cuda))
        throw backend_error(l, fmt::format("backend cudnn was requested, but {}; choose backend cuda or auto, or "
                                           "raise the tolerance with --autotune-tolerance",
                                           e.what()));
      spdlog::warn("autotune: layer '{}' (conv2d): train.backend cudnn refused by the accuracy guard ({}); the layer "
                   "runs on our cuda kernels",
                   l.name(), e.what());
      tune_conv_on(l, planned, {Backend::cuda});
      for (ConvDir d : kConvDirs) planned.conv_plan().note(d) += " (cudnn refused: inaccurate)";
    }
  }

  // The tolerance of conv row `a` in a layer that allows `math`.
  double conv_algo_tolerance(const ConvAlgo& a, MathMode math) const {
    return conv_candidate_tolerance(a.dtype, a.math_used(math));
  }

  // Whether row `a` is a candidate of a layer of `dtype` on `backends` at `sh` under `math`:
  // Fit::other when it is of another dtype or backend or cannot implement the shape, Fit::skipped
  // (the reason in *why) when determinism or the workspace limit rules it out.
  enum class Fit { candidate, other, skipped };
  Fit conv_fit(const ConvAlgo& a, DType dtype, const std::vector<Backend>& backends, const Conv2dShape& sh,
               MathMode math, std::string* why) const {
    if (a.dtype != dtype || !allowed(backends, a.backend) || !a.can_implement(ctx, sh, math)) return Fit::other;
    if (ctx.deterministic && !a.deterministic) {
      if (why) *why = a.name + " (not deterministic)";
      return Fit::skipped;
    }
    if (size_t ws = a.workspace_bytes(ctx, sh, math); ws > opt.workspace_limit_bytes) {
      if (why) *why = fmt::format("{} (workspace {} MiB > limit {} MiB)", a.name, ws >> 20, opt.workspace_limit_bytes >> 20);
      return Fit::skipped;
    }
    return Fit::candidate;
  }

  // The cache key of direction d of conv layer l (autotune_conv_key).
  std::string conv_key(const Layer& l, ConvDir d, const Conv2dShape& sh, const std::vector<Backend>& backends) const {
    return autotune_conv_key(env, sh, d, backend_names(backends), ctx.deterministic, opt.workspace_limit_bytes,
                             opt.tolerance, l.math(), conv_candidate_tolerance(DType::f32, MathMode::tf32), l.dtype(),
                             conv_candidate_tolerance(l.dtype(), l.math()));
  }

  // The cached decision of `key` when its winner is still a candidate, asked of the winner's row
  // alone: a warm start queries no algorithm that lost (cuDNN's workspace sizes and heuristic
  // order, each a call into cuDNN) and makes no probe.
  std::optional<TuneOutcome> cached_conv(const std::string& key, ConvDir d, DType dtype,
                                         const std::vector<Backend>& backends, const Conv2dShape& sh, MathMode math) {
    const std::optional<TuneRecord> hit = cache.find(key);
    if (!hit) return std::nullopt;
    for (const ConvAlgo& a : conv2d_algos(d)) {
      if (a.name != hit->winner || a.dtype != dtype) continue;
      if (conv_fit(a, dtype, backends, sh, math, nullptr) != Fit::candidate) return std::nullopt;
      TuneOutcome out;
      out.record = *hit;
      out.from_cache = true;
      return out;
    }
    return std::nullopt;
  }

  void tune_conv_on(Layer& l, ConvPlanned& planned, const std::vector<Backend>& backends) {
    ConvPlan& plan = planned.conv_plan();
    const Conv2dShape sh = planned.conv_shape(batch);
    const MathMode math = l.math();
    const DType dtype = l.dtype();  // the candidates are this dtype's rows, timed on its operands
    // Operands, allocated when something is timed or checked: one set per bias setting, as a
    // forward whose bias is folded into the next batchnorm (Graph::fold_conv_biases) runs without.
    std::array<std::unique_ptr<ConvProbe>, 2> probe_ptrs;
    std::vector<std::string> parts;
    bool chosen = false;  // some direction had candidates to choose among (timed or cached)
    for (ConvDir d : kConvDirs) {
      const Conv2dShape sh_d = planned.conv_shape(batch, d);
      auto probe = [&, sh_d]() -> ConvProbe& {
        std::unique_ptr<ConvProbe>& p = probe_ptrs[sh_d.has_bias ? 1 : 0];
        if (!p) {
          p = std::make_unique<ConvProbe>(ctx, sh_d, 1, dtype);
          p->set_math(math);
          ++stats.probe_sets;
        }
        return *p;
      };
      if (plan.request(d) != "auto") {
        parts.push_back(requested_conv_direction(l, plan, d, sh_d, backends, probe));
        continue;
      }
      parts.push_back(tune_conv_direction(l, plan, d, sh_d, backends, probe, chosen));
    }
    l.set_backend(plan.algo(ConvDir::forward)->backend, "per direction (see the plan)");
    const std::string precision = dtype != DType::f32    ? fmt::format(", precision {}", to_string(dtype))
                                  : math != MathMode::fp32 ? fmt::format(", precision {}", to_string(math))
                                                           : std::string();
    const std::string line =
        fmt::format("layer '{}' (conv2d {}{}): {}", l.name(), sh.to_string(), precision, fmt::join(parts, "; "));
    lines.push_back(line);
    if (chosen) spdlog::info("autotune: {}", line);
    else spdlog::debug("autotune: {}", line);
  }

  // Direction d named by `algo:`: it must run here; a cuDNN one is checked by the guard. Returns
  // the log part.
  std::string requested_conv_direction(Layer& l, ConvPlan& plan, ConvDir d, const Conv2dShape& sh,
                                       const std::vector<Backend>& backends, const std::function<ConvProbe&()>& probe) {
    const ConvAlgo& a = explicit_algo(l, d, plan.request(d), sh, backends);
    std::string err;
    // A pass of the guard is cached (a warm start probes nothing); a failure is measured each time.
    const std::string key = conv_key(l, d, sh, backends) + "|requested " + a.name;
    const std::optional<TuneRecord> passed = cache.find(key);
    if (a.backend == Backend::cudnn && passed && passed->winner == "pass") {
      err = ", within the tolerance [cache]";
    } else if (a.backend == Backend::cudnn) {
      if (const std::optional<std::string> reference = conv_reference_name(ctx, sh, d)) {
        const double e = probe().run_and_compare(a);
        const double tol = conv_algo_tolerance(a, l.math());
        if (!(e <= tol))
          throw layer_error(l, fmt::format("algo '{}' for {} is {:.1e} from the reference {} on probe operands, "
                                           "over the accuracy tolerance {:.0e} (raise it with "
                                           "--autotune-tolerance to use this algorithm anyway)",
                                           a.name, to_string(d), e, *reference, tol));
        err = fmt::format(", rel_err {:.1e}", e);
        cache.put(key, TuneRecord{"pass", 0, "", 0});
      }
    }
    plan.algo(d) = &a;
    plan.note(d) = "requested";
    ++stats.untimed;
    return fmt::format("{} {} (requested{}){}", to_string(d), plan.request(d), err, conv_math_tag(a, l.math()));
  }

  // Direction d under `auto`: the cached winner when it still runs here, else the candidates
  // timed, each checked by the guard. Sets `chosen` when there was a choice. Returns the log part.
  std::string tune_conv_direction(Layer& l, ConvPlan& plan, ConvDir d, const Conv2dShape& sh,
                                  const std::vector<Backend>& backends, const std::function<ConvProbe&()>& probe,
                                  bool& chosen) {
    const MathMode math = l.math();
    const DType dtype = l.dtype();
    const std::string what = fmt::format("layer '{}' {}", l.name(), to_string(d));
    auto algo = [&](const std::string& name) -> const ConvAlgo& { return conv2d_algo(d, name, dtype); };
    const std::string key = conv_key(l, d, sh, backends);
    std::vector<std::string> names;
    std::optional<TuneOutcome> cached = cached_conv(key, d, dtype, backends, sh, math);
    if (!cached) {
      std::vector<std::string> skipped;
      for (const ConvAlgo& a : conv2d_algos(d)) {
        std::string why;
        const Fit fit = conv_fit(a, dtype, backends, sh, math, &why);
        if (fit == Fit::candidate) names.push_back(a.name);
        if (fit == Fit::skipped) skipped.push_back(why);
      }
      // On the CPU the default row's rule decides, not the clock (conv2d_cpu_rule_algo says why).
      if (ctx.device == Device::cpu) {
        const std::string rule = conv2d_cpu_rule_algo(sh, dtype);
        if (std::find(names.begin(), names.end(), rule) != names.end()) names = {rule};
      }
      if (!skipped.empty()) spdlog::info("autotune: {}: skipped {}", what, fmt::join(skipped, ", "));
      if (names.empty())
        throw layer_error(l, fmt::format("no {} algorithm can run {} here{}", to_string(d), sh.to_string(),
                                         skipped.empty() ? "" : fmt::format(" (skipped: {})", fmt::join(skipped, ", "))));
    }
    const std::optional<std::string> reference = cached ? std::nullopt : conv_reference_name(ctx, sh, d);
    auto measure = [&](const std::string& name) {
      const ConvAlgo& a = algo(name);
      const ConvOperands op = probe().operands(d);
      probe().poison(d);
      return time_ms(ctx, opt, [&] { a.run(ctx, sh, op); });
    };
    // The output the timed runs left, against the reference on the same operands.
    auto rel_error = [&](const std::string& name) { return probe().worst_error(algo(name)); };
    if (!cached && !reference && names.size() > 1)
      spdlog::warn("autotune: {}: no reference algorithm can run {}, so accuracy is not checked", what, sh.to_string());
    TuneOutcome r = cached ? *cached
                           : tune_choice(what, names, measure, cache, key,
                                         reference ? std::function<double(const std::string&)>(rel_error) : nullptr,
                                         std::function<double(const std::string&)>([&](const std::string& name) {
                                           return conv_algo_tolerance(algo(name), math);
                                         }));
    count(r, names.size());
    // The only candidate is not timed; a cuDNN one is still checked.
    const ConvAlgo& winner = algo(r.record.winner);
    if (names.size() == 1 && !r.from_cache && reference && winner.backend == Backend::cudnn) {
      r.winner_rel_err = probe().run_and_compare(winner);
      if (!(r.winner_rel_err <= conv_algo_tolerance(winner, math)))
        throw NoAccurateCandidate(fmt::format("autotune: {}: the only candidate {} is {:.1e} from the reference, "
                                              "over the accuracy tolerance {:.0e}",
                                              what, winner.name, r.winner_rel_err, conv_algo_tolerance(winner, math)));
    }
    plan.algo(d) = &winner;
    plan.note(d) = r.record.runner_up.empty()
                       ? std::string(names.size() == 1 ? "only candidate" : "autotuned")
                       : fmt::format("autotuned{}: {:.2f}x over {}", r.from_cache ? " (cache)" : "",
                                     r.record.runner_up_ms / std::max(r.record.ms, 1e-12), r.record.runner_up);
    chosen = chosen || r.from_cache || names.size() > 1;
    return fmt::format("{} {}{}", to_string(d), r.describe(), conv_math_tag(winner, math));
  }

  // A non-conv layer placed on cuDNN (by its `backend:` or by train.backend): its outputs against
  // our cuda kernels on probe operands. Over the op's tolerance: an error for the layer's own
  // request, a logged refusal (the layer runs on cuda) for train.backend's.
  void guard_cudnn_layer(int index) {
    Layer& l = *graph.node(index).layer;
    const double tol = layer_tolerance(l);
    const std::string what = fmt::format("layer '{}' ({})", l.name(), l.type());
    // A pass is cached, so a warm start probes nothing; a failure is measured on every start, so
    // its error is always reported.
    const std::string key = fmt::format("{}|cudnn guard|{}", env, layer_key(index, tol));
    if (const std::optional<TuneRecord> hit = cache.find(key); hit && hit->winner == "pass") {
      ++stats.cache_hits;
      log(fmt::format("{} cudnn: within {:.0e} of our cuda kernels [cache]", what, tol));
      return;
    }
    ++stats.probe_sets;
    const std::optional<LayerAccuracy> acc = layer_backend_error(graph, index, ctx, batch, Backend::cudnn, Backend::cuda);
    if (!acc) {
      spdlog::warn("autotune: {}: our cuda kernels cannot run it, so cuDNN's accuracy is not checked", what);
      return;
    }
    if (acc->rel_err <= tol) {
      cache.put(key, TuneRecord{"pass", 0, "", 0});
      log(fmt::format("{} cudnn: {:.1e} from our cuda kernels ({}), within {:.0e}", what, acc->rel_err, acc->worst, tol));
      return;
    }
    const std::string why = fmt::format("cuDNN's {} is {:.1e} from our cuda kernels on probe operands ({}), over the "
                                        "{} tolerance {:.0e}",
                                        l.type(), acc->rel_err, acc->worst, l.type(), tol);
    if (!l.backend_from_train())
      throw backend_error(l, fmt::format("backend cudnn was requested, but {}; choose backend cuda or auto, or raise "
                                         "the tolerance with --autotune-tolerance",
                                         why));
    spdlog::warn("autotune: {}: train.backend cudnn refused by the accuracy guard: {}; the layer runs on our cuda "
                 "kernels",
                 what, why);
    l.set_backend(Backend::cuda, fmt::format("train.backend cudnn refused: {:.1e} from cuda", acc->rel_err));
    log(fmt::format("{}: cudnn refused ({:.1e} from cuda, over {:.0e}), runs on cuda", what, acc->rel_err, tol));
  }

  // The layer part of a non-conv layer's cache keys: type, attributes, input shapes at the batch,
  // determinism, tolerance and the activations' dtype (another dtype runs other rows).
  std::string layer_key(int index, double tol) const {
    const GraphNode& node = graph.node(index);
    const Layer& l = *node.layer;
    std::vector<std::string> in_shapes;
    for (int in : node.inputs)
      in_shapes.push_back(
          (in == Graph::kModelInput ? graph.input_shape() : graph.node(in).out_shape).with_batch(batch).to_string());
    const int act = node.fused_act;
    return fmt::format("{} {} in {}|det {}|tol {:g}|guard 1|dtype {}|then {}", l.type(), l.summary(),
                       fmt::join(in_shapes, " "), int(ctx.deterministic), tol, to_string(l.dtype()),
                       act >= 0 ? graph.node(act).layer->type() : std::string("-"));
  }

  static std::vector<std::string> backend_names(const std::vector<Backend>& bs) {
    std::vector<std::string> s;
    for (Backend b : bs) s.push_back(to_string(b));
    return s;
  }

  // cuda vs cudnn for a layer that supports both: forward + backward on scratch tensors.
  void tune_backend(int index) {
    GraphNode& node = graph.node(index);
    Layer& l = *node.layer;
    // Activations in the layer's dtype, so the rows measured are the ones it runs.
    const DType dtype = l.dtype();
    auto in_shape = [&](int in) {
      return (in == Graph::kModelInput ? graph.input_shape() : graph.node(in).out_shape).with_batch(batch);
    };
    // The operands, made at the first measurement: a decision found in the cache needs none, and
    // making them (random numbers on the host, uploads) was most of a warm start's autotune time.
    struct Operands {
      std::vector<Tensor> params, grads, xs, dxs;
      Tensor y, dy;
      std::vector<const Tensor*> xp;
      std::vector<Tensor*> dxp;
    };
    std::unique_ptr<Operands> ops;
    auto operands = [&]() -> Operands& {
      if (ops) return *ops;
      ops = std::make_unique<Operands>();
      ++stats.probe_sets;
      Operands& o = *ops;
      uint64_t seed = 10;
      for (const ParamInfo& p : l.params()) {
        o.params.push_back(scratch(ctx, p.shape, seed++));
        o.grads.push_back(p.trainable ? Tensor::empty(p.shape, ctx.device, "autotune grad") : Tensor());
      }
      for (int in : node.inputs) {
        const Shape s = in_shape(in);
        o.xs.push_back(scratch(ctx, s, seed++, dtype));
        o.dxs.push_back(Tensor::empty(s, ctx.device, "autotune dx", dtype));
      }
      o.y = Tensor::empty(node.out_shape.with_batch(batch), ctx.device, "autotune y", dtype);
      o.dy = scratch(ctx, node.out_shape.with_batch(batch), seed++, dtype);
      for (size_t i = 0; i < o.xs.size(); ++i) o.xp.push_back(&o.xs[i]), o.dxp.push_back(&o.dxs[i]);
      return o;
    };
    RunContext rc;
    rc.exec = &ctx;
    // The activation fused into the layer (Graph::fuse_activations fused it while the layer was on
    // our kernels). Each candidate is timed as the step would run it: on cuda with the activation
    // fused, on cudnn (which fuses nothing) with the activation as its own kernels after it. Timed
    // with the fusion left in place, the "cudnn" candidate ran our fused kernels: ties, a random
    // pick, and the pick cached for an unfused layer of the same shape that then ran cuDNN's
    // batchnorm at a tenth of the speed (mini_xception b256: 3.6 -> 4.5 ms a step).
    const ActivationParams* act = node.fused_act >= 0 ? graph.node(node.fused_act).layer->activation() : nullptr;
    auto measure = [&](const std::string& name) {
      Operands& o = operands();
      l.bind(o.params, o.grads);  // every time: the accuracy probe binds its own operands
      l.prepare(batch, ctx.device);
      const Backend b = parse_backend(name);
      l.fuse_activation(nullptr);
      l.set_backend(b, "measuring");
      const bool fused = act && l.fuse_activation(act);
      const bool apart = act && !fused;
      const int64_t n = o.y.numel();
      return time_ms(ctx, opt, [&] {
        l.forward(rc, o.xp, o.y);
        if (apart) {  // the activation layer's own kernels, as the step runs them after a cudnn layer
          run_op(Backend::cuda, ActivationForward{&ctx, *act, n, o.y.view(), o.y.view()});
          run_op(Backend::cuda, ActivationBackwardFromOutput{&ctx, *act, n, o.y.view(), o.dy.view(), o.dy.view()});
        }
        l.backward(rc, o.xp, o.y, o.dy, o.dxp);
      });
    };
    // Accuracy guard: cuda is the reference; cudnn is compared with it on probe operands.
    const double tol = layer_tolerance(l);
    auto rel_error = [&](const std::string& name) {
      if (name != "cudnn") return 0.0;
      ++stats.probe_sets;
      const std::optional<LayerAccuracy> acc =
          layer_backend_error(graph, index, ctx, batch, Backend::cudnn, Backend::cuda);
      return acc ? acc->rel_err : 0.0;
    };
    const std::string what = fmt::format("layer '{}' ({})", l.name(), l.type());
    // "guard 1" in the key: decisions cached before cuDNN's non-conv ops were checked are not reused.
    const std::string key = fmt::format("{}|{}", env, layer_key(index, tol));
    const TuneOutcome r = tune_choice(what, {"cuda", "cudnn"}, measure, cache, key, rel_error, tol);
    count(r, 2);
    std::string how = fmt::format("measured{}", r.from_cache ? " (cache)" : "");
    if (!r.record.runner_up.empty())
      how += fmt::format(": {:.2f}x over {}", r.record.runner_up_ms / std::max(r.record.ms, 1e-12), r.record.runner_up);
    l.set_backend(parse_backend(r.record.winner), how);  // its fusion: autotune_graph redoes them all at the end
    const std::string with = act ? fmt::format(" (+ {})", graph.node(node.fused_act).layer->name()) : std::string();
    log(fmt::format("{} forward+backward{}: {}", what, with, r.describe()));
  }
};

}  // namespace

std::vector<std::string> autotune_graph(Graph& graph, const ExecContext& ctx, int64_t batch,
                                        const AutotuneOptions& opt, AutotuneStats* stats) {
  Tuner t{graph, ctx, batch, opt, AutotuneCache(ctx.device == Device::cuda ? opt.cache_path : std::string()),
          autotune_environment_key(), {}, {}};
  t.stats.cache_path = t.cache.path();
  t.stats.cache_entries = t.cache.size();
  if (opt.tune) {
    for (int i = 0; i < graph.size(); ++i) {
      Layer& l = *graph.node(i).layer;
      const int into = graph.node(i).fused_into;
      if (ConvPlanned* planned = l.conv_planned())
        t.tune_conv(l, *planned);
      else if (l.backend_to_measure() && into >= 0 &&
               (graph.node(into).layer->backend() == Backend::cuda || graph.node(into).layer->fuses_on_any_backend()))
        // Fused into a producer that stays on our kernels (or applies it with them on any backend):
        // its cost is the producer's.
        l.set_backend(Backend::cuda, fmt::format("fused into '{}'", graph.node(into).layer->name()));
      else if (l.backend_to_measure())
        t.tune_backend(i);
      else if (l.backend() == Backend::cudnn)
        t.guard_cudnn_layer(i);
    }
    t.cache.save();
  }
  if (stats) *stats = t.stats;
  if (opt.share) {
    const std::string mine = opt.tune ? autotune_decisions(graph) : std::string();
    const std::string job = opt.share(mine);
    if (job != mine) {
      apply_autotune_decisions(graph, job, "rank 0's choice");
      t.log(opt.tune ? "this rank chose differently; rank 0's decisions apply" : "rank 0's decisions apply");
    }
  }
  // Fusions follow the chosen backends: an activation stays fused only into our kernels (a layer
  // that went to cudnn gets its activation back as a layer of its own).
  graph.fuse_activations(graph.fusion_enabled());
  return t.lines;
}

}  // namespace cnn
