// End-to-end tests of early stopping and the val macro-F1: a run stops after `patience` epochs
// without an improvement, says why in the log and in metrics.jsonl, and a resume of a run stopped
// early trains nothing unless the patience is raised; every epoch line has val_macro_f1, and
// the best checkpoint can follow it.
#include "app/app_util.h"
#include "app/ckpt_util.h"
#include "support/catch.h"
#include "checkpoint/checkpoint_state.h"

using namespace cnn;
using namespace cnn::test::ckpt;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

const char* kNet = R"(name: stopper
input: {channels: 1, height: 8, width: 8}
classes: [a, b, c, d]
layers:
  - {name: conv1, type: conv2d, filters: 4, kernel: 3, padding: 1}
  - {name: relu1, type: relu}
  - {name: fc, type: dense, units: 4}
data: {format: synthetic, synthetic_size: 64}
train:
  epochs: 6
  batch_size: 16
  optimizer: {type: sgd, lr: 0.05}
)";

std::vector<nlohmann::json> metrics(const std::string& run_dir) { return test::read_metrics(run_dir); }

std::vector<nlohmann::json> events(const std::vector<nlohmann::json>& lines, const std::string& event) {
  std::vector<nlohmann::json> out;
  for (const auto& l : lines)
    if (l["event"] == event) out.push_back(l);
  return out;
}

}  // namespace

TEST_CASE("early stopping ends a run after patience epochs without improvement and says why", "[cpu]") {
  test::TempDir dir("cnn-early");
  const std::string model = (dir / "net.yaml").string(), run_dir = (dir / "run").string();
  write_file(model, kNet);
  // No val_loss can fall by more than 100: epoch 1 sets the best, epochs 2 and 3 do not improve.
  Finished f = run("cnn-train", {model, "--out", run_dir, "--device", "cpu", "--set",
                                 "train.early_stopping={metric: val_loss, patience: 2, min_delta: 100}"});
  INFO(f.describe());
  REQUIRE(f.exit_code == 0);
  CHECK_THAT(f.err, Contains("early stopping after epoch 3: val_loss has not improved by more than 100 for 2 epochs "
                             "(best "));
  CHECK_THAT(f.err, Contains("after epoch 1)"));
  std::vector<nlohmann::json> lines = metrics(run_dir);
  std::vector<nlohmann::json> epochs = events(lines, "epoch");
  REQUIRE(epochs.size() == 3);
  CHECK(epochs[2]["early_stopping"]["bad_epochs"] == 2);
  REQUIRE(events(lines, "end").size() == 1);
  CHECK(events(lines, "end")[0]["reason"] == "early_stopping");
  CHECK(events(lines, "end")[0]["metric"] == "val_loss");
  CHECK(events(lines, "test").size() == 1);  // the test split is still reported
  CHECK(read_checkpoint(run_dir).meta.epoch == 3);
  CHECK_THAT(read_file(fs::path(run_dir) / "train.log"), Contains("early stopping after epoch 3"));

  // Resumed as it is: stopped early, nothing to train; with a larger patience it trains on.
  f = run("cnn-train", {"--resume", run_dir, "--device", "cpu"});
  INFO(f.describe());
  CHECK(f.exit_code == 0);
  CHECK_THAT(f.err, Contains("nothing to train: the run stopped early after epoch 3"));
  CHECK(events(metrics(run_dir), "epoch").size() == 3);
  f = run("cnn-train", {"--resume", run_dir, "--device", "cpu", "--set", "train.early_stopping.patience=3"});
  INFO(f.describe());
  REQUIRE(f.exit_code == 0);
  CHECK(events(metrics(run_dir), "epoch").size() == 4);  // one more epoch without improvement: 3 of 3
  CHECK(events(metrics(run_dir), "end").back()["reason"] == "early_stopping");
}

TEST_CASE("every epoch line has the val macro-F1 and the best checkpoint can follow it", "[cpu]") {
  test::TempDir dir("cnn-early");
  const std::string model = (dir / "net.yaml").string(), run_dir = (dir / "run").string();
  write_file(model, kNet);
  Finished f = run("cnn-train", {model, "--out", run_dir, "--device", "cpu", "--epochs", "4", "--set",
                                 "train.checkpoint.best_metric=val_macro_f1"});
  INFO(f.describe());
  REQUIRE(f.exit_code == 0);
  CHECK_THAT(f.err, Contains(", val macro-F1 "));
  double best = -1;
  int64_t best_epoch = 0;
  for (const auto& line : events(metrics(run_dir), "epoch")) {
    INFO(line.dump());
    REQUIRE(line["val_macro_f1"].is_number());
    const double v = line["val_macro_f1"].get<double>();
    CHECK(line.value("best", false) == (v > best));
    if (v > best) best = v, best_epoch = line["epoch"].get<int64_t>();
  }
  CheckpointMeta m = read_checkpoint(run_dir + "/checkpoints/best.safetensors").meta;
  CHECK(m.epoch == best_epoch);
  CHECK(m.best_metric == Approx(best));
}
