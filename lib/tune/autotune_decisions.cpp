// The autotuner's decisions as text for the other ranks, and what the plans need and say (see
// autotune.h): workspace bytes, one line per conv direction.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <sstream>

#include "core/error.h"
#include "layers/conv_plan.h"
#include "tune/autotune.h"

namespace cnn {

std::string autotune_decisions(const Graph& graph) {
  std::string s;
  for (int i = 0; i < graph.size(); ++i) {
    const Layer& l = *graph.node(i).layer;
    if (const ConvPlanned* planned = l.conv_planned()) {
      s += "conv " + l.name();
      for (ConvDir d : kConvDirs) {
        const ConvAlgo* a = planned->conv_plan().algo(d);
        s += " " + (a ? a->name : std::string("-"));
      }
      s += "\n";
    } else {
      s += fmt::format("backend {} {}\n", l.name(), to_string(l.backend()));
    }
  }
  return s;
}

void apply_autotune_decisions(Graph& graph, const std::string& decisions, const std::string& how) {
  std::map<std::string, Layer*> layers;
  for (int i = 0; i < graph.size(); ++i) layers[graph.node(i).layer->name()] = graph.node(i).layer.get();
  std::istringstream in(decisions);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::istringstream f(line);
    std::string kind, name;
    f >> kind >> name;
    auto it = layers.find(name);
    CNN_CHECK(it != layers.end(), "autotune decisions: no layer '{}' in this graph ({})", name, line);
    Layer& l = *it->second;
    if (kind == "conv") {
      ConvPlanned* planned = l.conv_planned();
      CNN_CHECK(planned, "autotune decisions: layer '{}' is not a conv2d layer", name);
      ConvPlan& plan = planned->conv_plan();
      for (ConvDir d : kConvDirs) {
        std::string algo;
        f >> algo;
        CNN_CHECK(!algo.empty() && algo != "-", "autotune decisions: layer '{}' {} unresolved ({})", name,
                  to_string(d), line);
        const ConvAlgo* a = &conv2d_algo(d, algo, l.dtype());
        if (plan.algo(d) != a) plan.algo(d) = a, plan.note(d) = how;
      }
      l.set_backend(plan.algo(ConvDir::forward)->backend, "per direction (see the plan)");
    } else if (kind == "backend") {
      std::string b;
      f >> b;
      const Backend backend = parse_backend(b);
      if (backend != l.backend() || l.backend_to_measure()) l.set_backend(backend, how);
    } else {
      CNN_THROW("autotune decisions: unknown line '{}'", line);
    }
  }
}

size_t planned_workspace_bytes(Graph& graph, const ExecContext& ctx, int64_t batch) {
  size_t most = 0;
  for (int i = 0; i < graph.size(); ++i) {
    most = std::max(most, graph.node(i).layer->workspace_bytes(batch));
    ConvPlanned* planned = graph.node(i).layer->conv_planned();
    if (!planned) continue;
    for (ConvDir d : kConvDirs)
      if (const ConvAlgo* a = planned->conv_plan().algo(d))
        most = std::max(most, a->workspace_bytes(ctx, planned->conv_shape(batch, d), graph.node(i).layer->math()));
  }
  return most;
}

std::vector<std::string> describe_conv_plan(const Layer& layer) {
  const ConvPlanned* planned = layer.conv_planned();
  if (!planned) return {};
  const ConvPlan& plan = planned->conv_plan();
  std::vector<std::string> out;
  for (ConvDir d : kConvDirs) {
    const ConvAlgo* a = plan.algo(d);
    out.push_back(a ? fmt::format("{} {}{} ({})", to_string(d), a->name, conv_math_tag(*a, layer.math()),
                                  plan.notes[size_t(d)])
                    : fmt::format("{} {} (not resolved)", to_string(d), plan.request(d)));
  }
  return out;
}

std::string conv_math_tag(const ConvAlgo& a, MathMode allowed) {
  if (allowed == MathMode::fp32) return "";
  return fmt::format(" [{}]", to_string(a.math_used(allowed)));
}

}  // namespace cnn
