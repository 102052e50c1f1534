// Two autotune runs of one model text on the GPU sharing a fresh disk cache (cold, then warm):
// each run's stats, decisions and log lines, for the warm-start tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/model_spec.h"
#include "graph/graph.h"
#include "model/device_setup.h"
#include "support/test_util.h"
#include "tune/autotune.h"

namespace cnn::test {

struct TunedTwice {
  AutotuneStats stats[2];
  std::string decisions[2];
  std::vector<std::string> lines[2];
};

inline TunedTwice tune_twice(const std::string& model_text, int64_t batch) {
  TempDir dir;
  AutotuneOptions opt;
  opt.cache_path = (dir / "autotune.json").string();
  TunedTwice out;
  for (int run = 0; run < 2; ++run) {
    ModelSpec spec = parse_model_text(model_text, "t.yaml");
    auto g = Graph::build(spec);
    DeviceSetup dev("cuda", *g, false);
    out.lines[run] = autotune_graph(*g, dev.ctx(), batch, opt, &out.stats[run]);
    out.decisions[run] = autotune_decisions(*g);
  }
  return out;
}

}  // namespace cnn::test
