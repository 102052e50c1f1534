// cnn-train and cnn-bench with and without --no-cuda-graph: the option reaches the resolved config,
// the start log says whether the step is captured, and on a GPU both write the same metrics.
#include "app_util.h"
#include "support/catch.h"
#include "support/quick.h"
#include "support/test_util.h"

using namespace cnn::test;

namespace {

const char* kModel =
    "name: graph_e2e\n"
    "input: {channels: 1, height: 8, width: 8}\n"
    "layers:\n"
    "  - {name: conv1, type: conv2d, filters: 4, kernel: 3, padding: 1}\n"
    "  - {name: bn1, type: batchnorm}\n"
    "  - {name: relu1, type: relu}\n"
    "  - {name: drop1, type: dropout, p: 0.2}\n"
    "  - {name: fc, type: dense, units: 3}\n"
    "data: {format: synthetic, synthetic_size: 30}\n"
    "train: {epochs: 3, batch_size: 4, deterministic: true, clip_grad_norm: 1.0,\n"
    "        optimizer: {type: adam, lr: 0.001}}\n";

ProgramResult train(const TempDir& dir, const std::string& out, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"m.yaml", "--out", out};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_program(program_path("cnn-train"), args, dir.path());
}

}  // namespace

TEST_CASE("cnn-train on the cpu logs the cuda graph off and --no-cuda-graph reaches the config", "[cpu]") {
  TempDir dir("cnn-graph-cpu");
  write_text_file(dir / "m.yaml", kModel);
  ProgramResult r = train(dir, "run", {"--device", "cpu", "--epochs", "1"});
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out + r.err, Catch::Matchers::Contains("CUDA graph: off (CPU run)"));
  ProgramResult off = train(dir, "run-off", {"--device", "cpu", "--epochs", "1", "--no-cuda-graph"});
  INFO(off.describe());
  REQUIRE(off.exit_code == 0);
  CHECK_THAT(read_text_file(dir / "run-off/config.yaml"), Catch::Matchers::Contains("cuda_graph: false"));
}

// Under CNN_TEST_QUICK (instrumented runs) 2 epochs, not 3: the first still captures, the second replays.
TEST_CASE("cnn-train writes the same metrics with and without --no-cuda-graph", "[gpu]") {
  CNN_REQUIRE_GPU();
  TempDir dir("cnn-graph-gpu");
  write_text_file(dir / "m.yaml", kModel);
  const int n_epochs = quick() ? 2 : 3;
  const std::vector<std::string> common{"--device", "cuda", "--set", "data.gpu_resident=off", "--epochs",
                                        std::to_string(n_epochs)};
  ProgramResult on = train(dir, "on", common);
  INFO(on.describe());
  REQUIRE(on.exit_code == 0);
  CHECK_THAT(on.out + on.err, Catch::Matchers::Contains("CUDA graph: on (step captured, "));
  std::vector<std::string> no_graph = common;
  no_graph.push_back("--no-cuda-graph");
  ProgramResult off = train(dir, "off", no_graph);
  INFO(off.describe());
  REQUIRE(off.exit_code == 0);
  CHECK_THAT(off.out + off.err, Catch::Matchers::Contains("CUDA graph: off (train.cuda_graph is false"));
  std::vector<nlohmann::json> a = read_metrics(dir / "on"), b = read_metrics(dir / "off");
  REQUIRE(a.size() == b.size());
  int epochs = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].value("event", "") != "epoch") continue;
    ++epochs;
    for (const char* key : {"epoch", "step", "train_loss", "train_acc", "val_loss", "val_acc", "lr"}) {
      INFO("line " << i << " key " << key << ": " << a[i][key] << " against " << b[i][key]);
      CHECK(a[i][key] == b[i][key]);
    }
  }
  CHECK(epochs == n_epochs);
}

TEST_CASE("cnn-bench model says whether the step ran as a cuda graph", "[gpu]") {
  CNN_REQUIRE_GPU();
  TempDir dir("cnn-graph-bench");
  write_text_file(dir / "m.yaml", kModel);
  for (bool graph : {true, false}) {
    std::vector<std::string> args = {"model", "m.yaml", "--device", "cuda", "--steps", "3", "--repeats", "1"};
    if (!graph) args.push_back("--no-cuda-graph");
    ProgramResult r = run_program(program_path("cnn-bench"), args, dir.path());
    INFO(r.describe());
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.out,
               Catch::Matchers::Contains(graph ? "CUDA graph on (step captured, " : "CUDA graph off (--no-cuda-graph)"));
  }
}
