// Every model in models/ resumes both ways a user writes it: `cnn-train --resume RUN` and
// `cnn-train MODEL.yaml --resume RUN` (the file the run started from). The checkpoint holds the
// resolved config (every layer default written out); the file's config must be resolved the same
// way before the two are compared, or every default reads as a difference.
// Kept fast: synthetic data (8 training images), batch 2, one step a run, on the CPU; the large
// ImageNet-sized models get narrow layers through --set (4 filters a conv, 8 units a hidden dense
// layer, 10 classes instead of 1000 unnamed ones: the same layer types, keys and defaults, a
// fraction of the arithmetic and checkpoint).
#include <algorithm>

#include "app/ckpt_util.h"
#include "config/model_spec.h"
#include "graph/graph.h"
#include "support/catch.h"
#include "checkpoint/checkpoint_state.h"

using namespace cnn;
using namespace cnn::test::ckpt;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

std::vector<std::string> with_sets(std::vector<std::string> args, const std::vector<std::string>& sets) {
  for (const auto& s : sets) args.insert(args.end(), {"--set", s});
  return args;
}

}  // namespace

TEST_CASE("every bundled model resumes with --resume RUN alone and with its model file", "[cpu]") {
  test::TempDir dir("cnn-models");
  const std::vector<std::string> models = bundled_models();
  REQUIRE(models.size() >= 9);
  for (const std::string& model : models) {
    const std::string name = fs::path(model).stem().string(), run_dir = (dir / name).string();
    INFO(name);
    std::vector<std::string> sets = narrowing(model);
    for (const char* s : {"data.format=synthetic", "data.synthetic_size=8", "eval.batch_size=2"}) sets.push_back(s);
    const std::vector<std::string> common{"--device", "cpu", "--batch", "2", "--quiet"};
    std::vector<std::string> first{model, "--out", run_dir, "--max-steps", "1"};
    first.insert(first.end(), common.begin(), common.end());
    Finished f = run("cnn-train", with_sets(first, sets));
    INFO(f.describe());
    REQUIRE(f.exit_code == 0);
    REQUIRE(read_checkpoint(run_dir).meta.step == 1);

    // The checkpoint's config alone.
    f = run("cnn-train", {"--resume", run_dir, "--max-steps", "2", "--device", "cpu", "--quiet"});
    INFO(f.describe());
    CHECK(f.exit_code == 0);
    CHECK(read_checkpoint(run_dir).meta.step == 2);

    // The model file it started from, with the same command-line overrides.
    std::vector<std::string> with_file{model, "--resume", run_dir, "--max-steps", "3"};
    with_file.insert(with_file.end(), common.begin(), common.end());
    f = run("cnn-train", with_sets(with_file, sets));
    INFO(f.describe());
    CHECK(f.exit_code == 0);
    CHECK_THAT(f.err, !Contains("cannot resume"));
    CHECK(read_checkpoint(run_dir).meta.step == 3);
    fs::remove_all(run_dir);
  }
}
