// End-to-end tests of train.log and the start log: the log holds every info line of the run
// whatever the console shows (--quiet included): the start log with the optimizer, schedule and
// clipping, progress and epoch lines, the final test report with its confusion matrix, the
// checkpoint paths, warnings and the error that ended a run.
#include "app/app_util.h"
#include "app/ckpt_util.h"
#include "support/catch.h"
#include "support/test_util.h"

using namespace cnn;
using namespace cnn::test;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

std::string model_with(const std::string& train) {
  return "name: logged\n"
         "input: {channels: 1, height: 12, width: 12}\n"
         "classes: [angry, disgust, fear, happy]\n"
         "layers:\n"
         "  - {name: conv1, type: conv2d, filters: 4, kernel: 3, padding: 1}\n"
         "  - {name: relu1, type: relu}\n"
         "  - {name: fc, type: dense, units: 4}\n"
         "data: {format: synthetic, synthetic_size: 128}\n"
         "train:\n" +
         train;
}

}  // namespace

TEST_CASE("train.log holds the whole run at info level even with --quiet", "[cpu]") {
  TempDir dir("cnn-log");
  write_text_file(dir / "m.yaml", model_with("  epochs: 1\n  batch_size: 16\n  optimizer: {type: sgd, lr: 0.05}\n"));
  ProgramResult r = run_program(program_path("cnn-train"), {"m.yaml", "--device", "cpu", "--out", "run", "--quiet"},
                                dir.path());
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);
  CHECK(r.err.empty());  // the console shows warnings and errors only, and there were none
  const std::string log = read_text_file(dir / "run/train.log");
  INFO(log);
  for (const char* line :
       {"info: run directory: run", "info: data: ", "info: class histogram:", "info: normalisation: ",
        "info: device: cpu", "info: model 'logged': ", "info: optimizer: sgd (lr 0.05", "info: schedule: constant (warmup_epochs 0.0",
        "info: gradient clipping: off", "info: epoch 1/1 step 8/8: ", "info: epoch 1/1: train loss ",
        "val macro-F1 ", "info: result:", "confusion matrix (rows: true class", "test accuracy: ", "run directory: run",
        "checkpoint: run/checkpoints/last.safetensors", "best checkpoint: run/checkpoints/best.safetensors"})
    CHECK_THAT(log, Contains(line));
  // What the program printed, the log has too.
  CHECK_THAT(log, Contains(r.out.substr(0, r.out.find('\n'))));
}

TEST_CASE("train.log of a resumed run appends warnings, overrides and the error that ended the run", "[cpu]") {
  TempDir dir("cnn-log");
  write_text_file(dir / "m.yaml", model_with("  epochs: 1\n  batch_size: 16\n  optimizer: {type: sgd, lr: 0.05}\n"));
  ProgramResult first = run_program(program_path("cnn-train"),
                                    {"m.yaml", "--device", "cpu", "--out", "run", "--quiet"}, dir.path());
  REQUIRE(first.exit_code == 0);
  const std::string ckpt = (dir / "run/checkpoints/last.safetensors").string();
  // A file-size limit below the checkpoint's size makes its write fail with EFBIG, like a full disk.
  ckpt::SpawnOptions opt;
  opt.file_size_limit = int64_t(fs::file_size(ckpt) / 2);
  ckpt::Finished f = ckpt::run("cnn-train",
                               {"--resume", (dir / "run").string(), "--epochs", "2", "--seed", "7", "--device", "cpu",
                                "--quiet"},
                               opt);
  INFO(f.describe());
  REQUIRE(f.exit_code == 1);
  const std::string log = read_text_file(dir / "run/train.log");
  INFO(log);
  CHECK_THAT(log, Contains("info: epoch 1/1: train loss "));  // the first run's lines are kept
  CHECK_THAT(log, Contains("info: resume: overriding train.epochs: 1 -> 2"));
  CHECK_THAT(log, Contains("warning: train.seed changed from 42 to 7"));
  CHECK_THAT(log, Contains("error: cannot write '" + ckpt + "'"));
  CHECK_THAT(log, Contains("File too large"));
  nlohmann::json end = last_event(read_metrics(dir / "run"), "end");
  CHECK(end["reason"] == "error");
  CHECK_THAT(end["message"].get<std::string>(), Contains("cannot write"));
}

TEST_CASE("the start log shows the optimizer with its weight decay, the schedule and its parameters, and clipping",
          "[cpu]") {
  TempDir dir("cnn-log");
  write_text_file(dir / "m.yaml",
                  model_with("  epochs: 1\n  batch_size: 16\n  clip_grad_norm: 2.5\n"
                             "  optimizer: {type: sgd, lr: 0.05, momentum: 0.8, weight_decay: 0.0005}\n"
                             "  schedule: {type: step, step_size: 3, gamma: 0.5, warmup_epochs: 1}\n"
                             "  early_stopping: {metric: val_acc, patience: 4, min_delta: 0.01}\n"));
  ProgramResult r = run_program(program_path("cnn-train"), {"m.yaml", "--device", "cpu", "--out", "run"}, dir.path());
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Contains("optimizer: sgd (lr 0.05, momentum 0.8, weight_decay 0.0005, nesterov false)"));
  CHECK_THAT(r.err, Contains("schedule: step (step_size 3, gamma 0.5, warmup_epochs 1, warmup_start_factor 0.0)"));
  CHECK_THAT(r.err, Contains("gradient clipping: global L2 norm at most 2.5"));
  CHECK_THAT(r.err, Contains("early stopping: after 4 epochs without a val_acc improvement by more than 0.01"));
}
