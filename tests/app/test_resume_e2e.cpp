// Exact resume through the real cnn-train: a run split by --epochs, stopped by SIGTERM/SIGINT
// mid-epoch or by --max-steps, then resumed, ends bit for bit where the straight run ends (every
// tensor of last.safetensors, the metrics of every epoch). The model has batchnorm, dropout,
// random crops and flips, Adam and a warmup+step schedule, so every piece of state must replay.
#include <signal.h>

#include <chrono>
#include <thread>

#include "app/app_util.h"
#include "app/ckpt_util.h"
#include "data/image_io.h"
#include "data/synthetic_faces.h"
#include "support/catch.h"
#include "checkpoint/checkpoint_state.h"

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
  CHECK(a.loss_scale == b.loss_scale);  // fp16's scale and counters (empty in other precisions)
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

TEST_CASE("a bf16 run split by --epochs and resumed equals the straight bf16 run bit for bit", "[cpu]") {
  Fixture fx;
  Finished straight = train_ok({fx.model, "--out", fx.run_dir("straight"), "--precision", "bf16"});
  CHECK_THAT(straight.err, Contains("precision: bf16:"));
  CHECK_THAT(straight.err, Contains("cast input -> "));
  train_ok({fx.model, "--out", fx.run_dir("split"), "--epochs", "2", "--quiet", "--precision", "bf16"});
  Finished f = train_ok({"--resume", fx.run_dir("split"), "--epochs", "4"});  // the checkpoint's precision
  CHECK_THAT(f.err, Contains("precision: bf16:"));
  require_same_end(fx, "straight", "split");
  // And bf16 really differs from fp32: the test could fail if the precision were ignored.
  train_ok({fx.model, "--out", fx.run_dir("fp32"), "--quiet"});
  CHECK(tensor_differences(fx.last("fp32"), fx.last("straight")) != "");
}

TEST_CASE("an fp16 run split by --epochs and resumed equals the straight fp16 run bit for bit, loss scale included",
          "[cpu]") {
  Fixture fx;
  // Growth every 5 clean steps: over 24 steps the scale moves, so a scale or counter that the
  // resume did not restore would show in the checkpoint.
  const std::vector<std::string> fp16{"--precision", "fp16", "--set", "train.loss_scale.growth_interval=5"};
  std::vector<std::string> args{fx.model, "--out", fx.run_dir("straight")};
  args.insert(args.end(), fp16.begin(), fp16.end());
  Finished straight = train_ok(args);
  CHECK_THAT(straight.err, Contains("precision: fp16:"));
  CHECK_THAT(straight.err, Contains("loss scale (fp16): dynamic, starting at 65536"));
  args = {fx.model, "--out", fx.run_dir("split"), "--epochs", "2", "--quiet"};
  args.insert(args.end(), fp16.begin(), fp16.end());
  train_ok(args);
  const CheckpointMeta half = read_checkpoint(fx.last("split")).meta;
  REQUIRE(half.loss_scale.count("clean_steps"));
  Finished f = train_ok({"--resume", fx.run_dir("split"), "--epochs", "4"});  // the checkpoint's precision
  CHECK_THAT(f.err, Contains("precision: fp16:"));
  require_same_end(fx, "straight", "split");
  const CheckpointMeta end = read_checkpoint(fx.last("straight")).meta;
  CHECK(end.loss_scale.at("scale") != "65536");  // it grew (or overflowed and shrank)
  // And fp16 really differs from bf16: the test could fail if the precision were ignored.
  train_ok({fx.model, "--out", fx.run_dir("bf16"), "--quiet", "--precision", "bf16"});
  CHECK(tensor_differences(fx.last("bf16"), fx.last("straight")) != "");
  CHECK(read_checkpoint(fx.last("bf16")).meta.loss_scale.empty());
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
  CHECK_THAT(f.err, Contains("resume with: cnn-train --resume " + fx.run_dir("capped") + " (trains on to epoch 4"));
  CheckpointMeta m = read_checkpoint(fx.run_dir("capped")).meta;
  CHECK(m.epoch == 1);
  CHECK(m.next_batch == 2);
  CHECK(m.step == 8);

  // The same cap again trains nothing and writes nothing: no checkpoint, no metrics line.
  const std::string before = read_file(fx.last("capped"));
  const std::string metrics = read_file(fs::path(fx.run_dir("capped")) / "metrics.jsonl");
  f = train_ok({"--resume", fx.run_dir("capped"), "--max-steps", "8"});
  CHECK_THAT(f.err, Contains("nothing to train: step 8 has reached train.max_steps = 8"));
  CHECK(read_file(fx.last("capped")) == before);
  CHECK(read_file(fs::path(fx.run_dir("capped")) / "metrics.jsonl") == metrics);

  // Without --max-steps the resumed run takes the checkpoint's cap off and trains to the end.
  f = train_ok({"--resume", fx.run_dir("capped")});
  CHECK_THAT(f.err, Contains("resume: overriding train.max_steps: 8 -> 0"));
  require_same_end(fx, "straight", "capped");
}

TEST_CASE("metrics.jsonl has one start line per segment and no line from a resume with nothing to train", "[cpu]") {
  Fixture fx;
  train_ok({fx.model, "--out", fx.run_dir("run"), "--max-steps", "8", "--quiet"});
  train_ok({"--resume", fx.run_dir("run"), "--epochs", "3", "--quiet"});
  const std::string metrics = read_file(fs::path(fx.run_dir("run")) / "metrics.jsonl");
  // Finished: --resume again, with or without the model file, has nothing to train.
  Finished f = train_ok({"--resume", fx.run_dir("run"), "--epochs", "3"});
  CHECK_THAT(f.err, Contains("nothing to train: the run has finished its 3 epochs (step 18)"));
  f = train_ok({fx.model, "--resume", fx.run_dir("run"), "--epochs", "3"});
  CHECK_THAT(f.err, Contains("nothing to train"));
  CHECK(read_file(fs::path(fx.run_dir("run")) / "metrics.jsonl") == metrics);

  const std::vector<nlohmann::json> lines = test::read_metrics(fx.run_dir("run"));
  // Segment 1: start, epoch 1, test, end (max_steps); segment 2: start, epochs 2 and 3, test, end.
  std::vector<std::string> events;
  for (const auto& l : lines) events.push_back(l["event"]);
  CHECK(events == std::vector<std::string>{"start", "epoch", "test", "end", "start", "epoch", "epoch", "test", "end"});
  const nlohmann::json& first = lines[0];
  CHECK(first["step"] == 0);
  CHECK(first["epoch"] == 1);
  CHECK(first["next_batch"] == 0);
  CHECK(first["resumed_from"].is_null());
  CHECK(first["max_steps"] == 8);
  CHECK(lines[3]["reason"] == "max_steps");
  CHECK(lines[3]["step"] == 8);
  const nlohmann::json& second = lines[4];
  CHECK(second["step"] == 8);
  CHECK(second["epoch"] == 2);
  CHECK(second["next_batch"] == 2);
  CHECK(second["resumed_from"] == fx.last("run"));
  CHECK(second["max_steps"] == 0);
  CHECK(second["epochs"] == 3);
  // The resume carries the checkpoint's elapsed time, taken when it was written: at least the epoch
  // line's before it, but the end line after the checkpoint may be a few ms later (it was, under
  // load, 0.186 against 0.190 s).
  CHECK(second["elapsed_s"].get<double>() >= lines[1]["elapsed_s"].get<double>());
  CHECK(lines[8]["reason"] == "finished");
  CHECK(lines[8]["step"] == 18);
  CHECK(lines[8]["steps_trained"] == 10);
}

TEST_CASE("an image-folder run whose classes come from the folders resumes with its model file", "[cpu]") {
  if (!image_io_available()) CNN_SKIP("this build has no OpenCV: image-folder data can't be read");
  test::TempDir dir("cnn-resume");
  const char* splits[3] = {"train", "val", "test"};
  auto write_images = [&](const std::vector<std::string>& classes) {
    fs::remove_all(dir / "images");
    for (int s = 0; s < 3; ++s) {
      Dataset d = make_synthetic_faces(12, 3, 1, 8, 8, uint64_t(s + 3));
      for (int64_t i = 0; i < d.size(); ++i) {
        fs::path p = dir / "images" / splits[s] / classes[size_t(d.labels[size_t(i)])] / fmt::format("{:03d}.png", i);
        fs::create_directories(p.parent_path());
        write_image_file(p.string(), d.sample(i), 1, 8, 8);
      }
    }
  };
  write_images({"cat", "dog", "owl"});
  const std::string model = (dir / "folder.yaml").string(), run_dir = (dir / "run").string();
  // No `classes`: the run takes them from the folders and records them in its config.
  write_file(model, "name: folder\ninput: {channels: 1, height: 8, width: 8}\nlayers:\n"
                    "  - {name: conv1, type: conv2d, filters: 2, kernel: 3, padding: 1}\n"
                    "  - {name: relu1, type: relu}\n  - {name: fc, type: dense, units: 3}\n"
                    "data: {format: image-folder, path: " + (dir / "images").string() + "}\n"
                    "train: {epochs: 2, batch_size: 4}\n");
  train_ok({model, "--out", run_dir, "--max-steps", "1", "--quiet"});
  Finished f = train_ok({model, "--resume", run_dir, "--max-steps", "2"});
  CHECK_THAT(f.err, !Contains("resume: overriding classes"));
  CHECK(read_checkpoint(run_dir).meta.step == 2);
  // Folders renamed since: the class names the data supplies no longer match the checkpoint's.
  write_images({"cat", "dog", "eel"});
  f = train({model, "--resume", run_dir, "--max-steps", "3"});
  INFO(f.describe());
  CHECK(f.exit_code == 2);
  CHECK_THAT(f.err, Contains("classes[2]: checkpoint owl, now eel"));
  CHECK(read_checkpoint(run_dir).meta.step == 2);
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
  // Wider convolutions: a checkpoint several times train.log's size, so the limit below stops the
  // checkpoint's write and no log line (train.log ends with the start-up breakdown's table).
  std::string wide = kNet;
  wide.replace(wide.find("filters: 4"), 10, "filters: 32");
  Fixture fx(wide);
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
