// End-to-end tests of the run directory's ownership: one run owns it (a lock for its whole life),
// a fresh run is refused where a run already is unless --resume or --overwrite (which leaves no
// file of the old run behind), and temporary checkpoint files of dead processes are cleaned up.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <thread>

#include "app/app_util.h"
#include "app/ckpt_util.h"
#include "support/catch.h"
#include "checkpoint/checkpoint_state.h"

using namespace cnn;
using namespace cnn::test::ckpt;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

// 64 training images, batch 16: 4 steps an epoch; a checkpoint every epoch.
const char* kNet = R"(name: owned
input: {channels: 1, height: 8, width: 8}
classes: [a, b, c, d]
layers:
  - {name: conv1, type: conv2d, filters: 2, kernel: 3, padding: 1}
  - {name: relu1, type: relu}
  - {name: fc, type: dense, units: 4}
data: {format: synthetic, synthetic_size: 64}
train:
  epochs: 2
  batch_size: 16
  optimizer: {type: sgd, lr: 0.05}
  checkpoint: {every_epochs: 1}
)";

struct Fixture {
  test::TempDir dir{"cnn-rundir"};
  std::string model = (dir / "net.yaml").string();
  std::string run_dir = (dir / "run").string();
  Fixture() { write_file(model, kNet); }
  fs::path ckpts() const { return fs::path(run_dir) / "checkpoints"; }
};

Finished train(std::vector<std::string> args, const SpawnOptions& opt = {}) {
  args.insert(args.end(), {"--device", "cpu"});
  return run("cnn-train", args, opt);
}

std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

size_t count_events(const std::string& run_dir, const std::string& event) {
  size_t n = 0;
  for (const nlohmann::json& line : test::read_metrics(run_dir)) n += line.value("event", "") == event;
  return n;
}

// A process id that no process has any more: a child that has exited and been reaped.
pid_t dead_pid() {
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return pid;
}

}  // namespace

TEST_CASE("a fresh run into a directory that holds a run is refused with exit 2 and leaves it untouched", "[cpu]") {
  Fixture fx;
  Finished first = train({fx.model, "--out", fx.run_dir, "--quiet"});
  INFO(first.describe());
  REQUIRE(first.exit_code == 0);
  const std::string last = read_file(fx.ckpts() / "last.safetensors");
  const std::string metrics = read_file(fs::path(fx.run_dir) / "metrics.jsonl");
  const std::string log = read_file(fs::path(fx.run_dir) / "train.log");
  Finished again = train({fx.model, "--out", fx.run_dir, "--epochs", "1"});
  INFO(again.describe());
  CHECK(again.exit_code == 2);
  CHECK_THAT(again.err, Contains("run directory '" + fx.run_dir + "' already holds a run (config.yaml, "
                                 "checkpoints/best.safetensors, checkpoints/epoch-0001.safetensors"));
  CHECK_THAT(again.err, Contains("continue it with --resume " + fx.run_dir + ", replace it with --overwrite"));
  CHECK(read_file(fx.ckpts() / "last.safetensors") == last);
  CHECK(read_file(fs::path(fx.run_dir) / "metrics.jsonl") == metrics);
  CHECK(read_file(fs::path(fx.run_dir) / "train.log") == log);
}

TEST_CASE("a run with --overwrite replaces the old run wholly: no checkpoint, metrics line or log line of it is left", "[cpu]") {
  Fixture fx;
  REQUIRE(train({fx.model, "--out", fx.run_dir, "--quiet"}).exit_code == 0);
  REQUIRE(fs::exists(fx.ckpts() / "epoch-0002.safetensors"));
  Finished f = train({fx.model, "--out", fx.run_dir, "--overwrite", "--epochs", "1", "--set",
                      "train.checkpoint.every_epochs=0", "--set", "name=owned_again"});
  INFO(f.describe());
  REQUIRE(f.exit_code == 0);
  CHECK_THAT(f.err, Contains("--overwrite: removed the previous run's config.yaml, metrics.jsonl, train.log, "
                             "checkpoints"));
  CHECK(names_in(fx.ckpts()) == std::vector<std::string>{"best.safetensors", "last.safetensors"});
  CHECK(count_events(fx.run_dir, "start") == 1);
  CHECK(count_events(fx.run_dir, "epoch") == 1);
  CHECK(read_checkpoint(fx.run_dir).meta.epoch == 1);
  CHECK_THAT(read_file(fs::path(fx.run_dir) / "config.yaml"), Contains("owned_again"));
  const std::string log = read_file(fs::path(fx.run_dir) / "train.log");
  CHECK(log.find("epoch 2/2") == std::string::npos);
  // --overwrite with --resume would delete what it resumes from.
  Finished both = train({"--resume", fx.run_dir, "--overwrite"});
  CHECK(both.exit_code == 2);
  CHECK_THAT(both.err, Contains("--overwrite starts a new run in place of an old one; --resume continues one"));
}

TEST_CASE("a second run with the same --out is refused while the first runs, naming the first's PID", "[cpu]") {
  Fixture fx;
  Process first("cnn-train", {fx.model, "--out", fx.run_dir, "--epochs", "100000", "--device", "cpu"});
  // Once a start line is written the first run holds the directory and is training.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (read_file(fs::path(fx.run_dir) / "metrics.jsonl").find("\"event\":\"start\"") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const std::string metrics_before = read_file(fs::path(fx.run_dir) / "metrics.jsonl");
  REQUIRE(metrics_before.find("\"event\":\"start\"") != std::string::npos);
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{fx.model, "--out", fx.run_dir}, {"--resume", fx.run_dir},
        {fx.model, "--out", fx.run_dir, "--overwrite"}}) {
    Finished second = train(args);
    INFO(second.describe());
    CHECK(second.exit_code == 2);
    CHECK_THAT(second.err, Contains("run directory '" + fx.run_dir + "' is in use by another cnn-train run (PID " +
                                    std::to_string(first.pid()) + ")"));
  }
  first.signal(SIGTERM);
  Finished f = first.wait();
  INFO(f.describe());
  CHECK(f.exit_code == 143);
  // The refused runs wrote nothing into the first one's files.
  const std::string metrics = read_file(fs::path(fx.run_dir) / "metrics.jsonl");
  CHECK(metrics.find("\"event\":\"start\"") == metrics.rfind("\"event\":\"start\""));
  CHECK(read_file(fs::path(fx.run_dir) / "train.log").find("in use by another") == std::string::npos);
  // Once it has ended, the directory is free again.
  Finished resumed = train({"--resume", fx.run_dir, "--max-steps", std::to_string(read_checkpoint(fx.run_dir).meta.step + 1)});
  INFO(resumed.describe());
  CHECK(resumed.exit_code == 0);
}

TEST_CASE("temporary checkpoint files of dead processes are removed at start and logged", "[cpu]") {
  Fixture fx;
  REQUIRE(train({fx.model, "--out", fx.run_dir, "--epochs", "1", "--quiet"}).exit_code == 0);
  const pid_t gone = dead_pid();
  const fs::path stale = fx.ckpts() / ("last.safetensors.tmp-" + std::to_string(gone));
  const fs::path live = fx.ckpts() / ("last.safetensors.tmp-" + std::to_string(::getpid()));
  write_file(stale, std::string(4096, 'x'));
  write_file(live, std::string(16, 'x'));
  Finished f = train({"--resume", fx.run_dir, "--epochs", "2"});
  INFO(f.describe());
  REQUIRE(f.exit_code == 0);
  CHECK_FALSE(fs::exists(stale));
  CHECK(fs::exists(live));  // its process (this test) is alive: not ours to remove
  CHECK_THAT(f.err, Contains("removed '" + stale.string() + "'"));
  CHECK_THAT(read_file(fs::path(fx.run_dir) / "train.log"), Contains("removed '" + stale.string() + "'"));
  CHECK_THAT(f.err, Contains("left '" + live.string() + "' alone"));
}
