// Exact resume through the real cnn-train: a run split by --epochs, stopped by SIGTERM/SIGINT
// mid-epoch or by --max-steps, then resumed, ends bit for bit where the straight run ends (every
// tensor of last.safetensors, the metrics of every epoch). The model has batchnorm, dropout,
// random crops and flips, Adam and a warmup+step schedule, so every piece of state must replay.
#include <signal.h>

#include <chrono>
#include <thread>

#include "app/ckpt_util.h"
#include "support/catch.h"
#include "train/checkpoint_state.h"

using namespace cnn;
using namespace cnn::test::ckpt;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

// 96 training images, batch 16: 6 steps an epoch, 24 in all.
const char* kNet = R"(name: resume_net
input: {channels: 1, height: 12, width: 12}
classes: [a, b, c, d]
layers:
  - {name: conv1, type: conv2d, filters: 4, kernel: 3, padding: 1, bias: false}
  - {name: bn1, type: batchnorm}
  - {name: relu1, type: relu}
  - {name: pool1, type: maxpool, kernel: 2}
  - {name: drop, type: dropout, p: 0.25}
  - {name: fc, type: dense, units: 4}
loss: {type: softmax_cross_entropy, label_smoothing: 0.1}
data:
  format: synthetic
  synthetic_size: 96
  augment: {random_crop: {size: 10, padding: 1}, hflip: true}
train:
  epochs: 4
  batch_size: 16
  optimizer: {type: adam, lr: 0.01}
  schedule: {type: step, step_size: 1, gamma: 0.7, warmup_epochs: 1}
)";

struct Fixture {
  test::TempDir dir{"cnn-resume"};
  std::string model = (dir / "net.yaml").string();
  explicit Fixture(const std::string& text = kNet) { write_file(model, text); }
  std::string run_dir(const std::string& name) const { return (dir / name).string(); }
  std::string last(const std::string& name) const { return run_dir(name) + "/checkpoints/last.safetensors"; }
};

// cnn-train on the CPU, deterministic; `args` come first (the model or --resume ...).
Finished train(std::vector<std::string> args, const SpawnOptions& opt = {}) {
  args.insert(args.end(), {"--device", "cpu", "--deterministic"});
  return run("cnn-train", args, opt);
}

Finished train_ok(std::vector<std::string> args, const SpawnOptions& opt = {}) {
  Finished f = train(std::move(args), opt);
  INFO(f.describe());
  REQUIRE(f.exit_code == 0);
  return f;
}

void require_same_end(const Fixture& fx, const std::string& straight, const std::string& resumed) {
  INFO("straight " << straight << ", resumed " << resumed);
  CHECK(tensor_differences(fx.last(straight), fx.last(resumed)) == "");
  CheckpointMeta a = read_checkpoint(fx.last(straight)).meta, b = read_checkpoint(fx.last(resumed)).meta;
  CHECK(a.epoch == b.epoch);
  CHECK(a.next_batch == b.next_batch);
  CHECK(a.step == b.step);
  CHECK(a.optimizer_steps == b.optimizer_steps);
  CHECK(a.schedule == b.schedule);
  CHECK(a.best_metric == b.best_metric);
  auto la = epoch_lines(fx.run_dir(straight)), lb = epoch_lines(fx.run_dir(resumed));
  REQUIRE(la.size() == 4);
  REQUIRE(lb.size() == 4);
  for (const auto& [epoch, line] : la) {
    INFO("epoch " << epoch << "\nstraight: " << line.dump() << "\nresumed:  " << lb[epoch].dump());
    for (const char* k : {"step", "train_loss", "train_acc", "val_loss", "val_acc", "lr"})
      CHECK(line[k] == lb[epoch][k]);
  }
}

}  // namespace

TEST_CASE("a run split by --epochs and resumed equals the straight run bit for bit", "[cpu]") {
  Fixture fx;
  train_ok({fx.model, "--out", fx.run_dir("straight"), "--quiet"});
  train_ok({fx.model, "--out", fx.run_dir("split"), "--epochs", "2", "--quiet"});
  CHECK(read_checkpoint(fx.run_dir("split")).meta.epoch == 2);
  Finished f = train_ok({"--resume", fx.run_dir("split"), "--epochs", "4"});
  CHECK_THAT(f.err, Contains("resume: overriding train.epochs: 2 -> 4"));
  CHECK_THAT(f.err, Contains("at epoch 3, batch 0 (step 12)"));
  require_same_end(fx, "straight", "split");
}

TEST_CASE("reduce-on-plateau state and the best metric survive a resume", "[cpu]") {
  std::string text = kNet;
  const std::string step = "schedule: {type: step, step_size: 1, gamma: 0.7, warmup_epochs: 1}";
  text.replace(text.find(step), step.size(), "schedule: {type: plateau, patience: 0, factor: 0.5, threshold: 0.5}");
  Fixture fx(text);
  train_ok({fx.model, "--out", fx.run_dir("straight"), "--quiet"});
  // The test must be able to fail: the straight run's lr has really been cut by then.
  REQUIRE(epoch_lines(fx.run_dir("straight"))[4]["lr"].get<double>() < 0.01 * 0.5 * 1.0001);
  train_ok({fx.model, "--out", fx.run_dir("split"), "--epochs", "2", "--quiet"});
  train_ok({"--resume", fx.run_dir("split"), "--epochs", "4", "--quiet"});
  require_same_end(fx, "straight", "split");
}

TEST_CASE("a run stopped by a signal mid-epoch resumes to the straight run's state bit for bit", "[cpu]") {
  Fixture fx;
  train_ok({fx.model, "--out", fx.run_dir("straight"), "--quiet"});
  struct Case {
    const char* signal;
    int step, exit_code;
    int64_t epoch, next_batch;
  };
  // Step 9 is batch 3 of epoch 2; step 6 is the last batch of epoch 1 (its end-of-epoch work is
  // left to the resumed run); step 14 is batch 2 of epoch 3.
  for (Case c : {Case{"TERM", 9, 143, 1, 3}, Case{"TERM", 6, 143, 0, 6}, Case{"INT", 14, 130, 2, 2}}) {
    std::string name = fmt::format("stop-{}-{}", c.signal, c.step);
    INFO(name);
    SpawnOptions opt;
    opt.env = {{"CNN_TEST_STOP_AT_STEP", std::to_string(c.step)}, {"CNN_TEST_STOP_SIGNAL", c.signal}};
    Finished stopped = train({fx.model, "--out", fx.run_dir(name)}, opt);
    INFO(stopped.describe());
    REQUIRE(stopped.exit_code == c.exit_code);
    CHECK_THAT(stopped.err, Contains("resume with: cnn-train --resume " + fx.run_dir(name)));
    CheckpointMeta m = read_checkpoint(fx.run_dir(name)).meta;
    CHECK(m.epoch == c.epoch);
    CHECK(m.next_batch == c.next_batch);
    CHECK(m.step == c.step);
    CHECK(m.epoch_progress.value("seen", int64_t(0)) == 16 * c.next_batch);
    CHECK(epoch_lines(fx.run_dir(name)).size() == size_t(c.epoch));
    train_ok({"--resume", fx.run_dir(name)});
    require_same_end(fx, "straight", name);
  }
}

TEST_CASE("a SIGTERM from outside stops training with exit 143 and a checkpoint that resumes", "[cpu]") {
  Fixture fx;
  std::string dir = fx.run_dir("long");
  Process p("cnn-train", {fx.model, "--out", dir, "--epochs", "100000", "--device", "cpu", "--deterministic"});
  // Once an epoch line is written the stop handlers are installed and training is under way.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (read_file(fs::path(dir) / "metrics.jsonl").find("\"event\":\"epoch\"") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  p.signal(SIGTERM);
  Finished f = p.wait();
  INFO(f.describe());
  REQUIRE(f.exit_code == 143);
  CHECK_THAT(f.err, Contains("stopped by signal 15"));
  CHECK_THAT(f.err, Contains("resume with: cnn-train --resume " + dir));
  CheckpointMeta m = read_checkpoint(dir).meta;
  CHECK(m.step >= 6);
  train_ok({"--resume", dir, "--max-steps", std::to_string(m.step + 2), "--quiet"});
  CHECK(read_checkpoint(dir).meta.step == m.step + 2);
}

TEST_CASE("a run capped by --max-steps saves the data cursor mid-epoch and resumes exactly",
          "[cpu]") {
  Fixture fx;
  train_ok({fx.model, "--out", fx.run_dir("straight"), "--quiet"});
  Finished f = train_ok({fx.model, "--out", fx.run_dir("capped"), "--max-steps", "8"});
  CHECK_THAT(f.err, Contains("train.max_steps = 8 reached (epoch 2, batch 2)"));
  CheckpointMeta m = read_checkpoint(fx.run_dir("capped")).meta;
  CHECK(m.epoch == 1);
  CHECK(m.next_batch == 2);
  CHECK(m.step == 8);

  // The same cap again trains nothing and leaves the checkpoint alone.
  std::string before = read_file(fx.last("capped"));
  f = train_ok({"--resume", fx.run_dir("capped")});
  CHECK_THAT(f.err, Contains("train.max_steps = 8 already reached"));
  CHECK(read_file(fx.last("capped")) == before);

  f = train_ok({"--resume", fx.run_dir("capped"), "--max-steps", "0"});
  CHECK_THAT(f.err, Contains("resume: overriding train.max_steps: 8 -> 0"));
  require_same_end(fx, "straight", "capped");
}

TEST_CASE("resume refuses a changed model or optimizer with exit 2 and lists the differences", "[cpu]") {
  Fixture fx;
  train_ok({fx.model, "--out", fx.run_dir("run"), "--epochs", "1", "--quiet"});
  std::string before = read_file(fx.last("run"));
  Finished f = train({"--resume", fx.run_dir("run"), "--set", "layers.fc.units=5", "--set", "layers.conv1.filters=8"});
  INFO(f.describe());
  CHECK(f.exit_code == 2);
  CHECK_THAT(f.err, Contains("cnn-train: error:"));
  CHECK_THAT(f.err, Contains("cannot resume"));
  CHECK_THAT(f.err, Contains("layers[5].units: checkpoint 4, now 5"));
  CHECK_THAT(f.err, Contains("layers[0].filters: checkpoint 4, now 8"));
  f = train({"--resume", fx.run_dir("run"), "--set", "train.optimizer.lr=0.5"});
  CHECK(f.exit_code == 2);
  CHECK_THAT(f.err, Contains("train.optimizer.lr: checkpoint 0.01, now 0.5"));
  f = train({fx.model, "--resume", fx.run_dir("run"), "--set", "train.batch_size=8"});
  CHECK(f.exit_code == 2);
  CHECK_THAT(f.err, Contains("train.batch_size: checkpoint 16, now 8"));
  f = train({"--resume", fx.run_dir("run"), "--init-from", fx.last("run")});
  CHECK(f.exit_code == 2);
  CHECK_THAT(f.err, Contains("cannot be combined with --init-from"));
  CHECK(read_file(fx.last("run")) == before);
}

TEST_CASE("a run --init-from a checkpoint with another head trains and logs what it could not load",
          "[cpu]") {
  Fixture fx;
  train_ok({fx.model, "--out", fx.run_dir("base"), "--epochs", "1", "--quiet"});
  SECTION("a renamed layer: missing and unexpected tensors") {
    Finished f = train_ok({fx.model, "--out", fx.run_dir("renamed"), "--epochs", "1", "--init-from", fx.last("base"),
                           "--set", "layers.fc.name=head"});
    CHECK_THAT(f.err, Contains("--init-from: missing: head.weight, head.bias"));
    CHECK_THAT(f.err, Contains("--init-from: unexpected: fc.weight, fc.bias"));
    CHECK(SafetensorsFile::open(fx.last("renamed")).contains("head.weight"));
  }
  SECTION("more classes: the head's shapes differ") {
    std::string five = std::string(kNet);
    five.replace(five.find("classes: [a, b, c, d]"), 21, "classes: [a, b, c, d, e]");
    five.replace(five.find("units: 4"), 8, "units: 5");
    std::string model5 = (fx.dir / "net5.yaml").string();
    write_file(model5, five);
    Finished f = train_ok({model5, "--out", fx.run_dir("five"), "--epochs", "1", "--init-from", fx.run_dir("base")});
    CHECK_THAT(f.err, Contains("--init-from: mismatched: fc.weight"));
    CHECK_THAT(f.err, Contains("fc.bias"));
    CHECK_THAT(f.err, !Contains("missing:"));
    CHECK(SafetensorsFile::open(fx.last("five")).info("fc.weight").shape == std::vector<int64_t>{5, 100});
  }
}

TEST_CASE("a checkpoint that cannot be written fails the run with exit 1 and keeps the previous one", "[cpu]") {
  Fixture fx;
  train_ok({fx.model, "--out", fx.run_dir("run"), "--epochs", "1", "--quiet"});
  std::string before = read_file(fx.last("run"));
  // A file-size limit below the checkpoint's size makes its write fail with EFBIG, root or not;
  // the log and metrics files stay far below it.
  SpawnOptions opt;
  opt.file_size_limit = int64_t(before.size() / 2);
  REQUIRE(fs::file_size(fs::path(fx.run_dir("run")) / "train.log") * 2 < uint64_t(opt.file_size_limit));
  Finished f = train({"--resume", fx.run_dir("run"), "--epochs", "2"}, opt);
  INFO(f.describe());
  CHECK(f.exit_code == 1);
  CHECK_THAT(f.err, Contains("cnn-train: error: cannot write '" + fx.last("run") + "'"));
  CHECK_THAT(f.err, Contains("File too large"));
  CHECK(read_file(fx.last("run")) == before);
  for (const auto& e : fs::directory_iterator(fs::path(fx.run_dir("run")) / "checkpoints"))
    CHECK(e.path().filename().string().find(".tmp-") == std::string::npos);
}
