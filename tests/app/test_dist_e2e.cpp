// Data-parallel training through the real programs under `mpirun --oversubscribe -np 2` on the
// CPU: two ranks equal one rank with twice the batch, a killed or stalled rank ends the job with
// a message naming it, a stop agreed by both ranks resumes with another world size, and doctor.
// Each multi-rank test runs twice: with Open MPI's default transport (shared memory on one host)
// and over TCP (`--mca pml ob1 --mca btl self,tcp` on the loopback interface), the path ranks on
// different nodes take. Every test skips when the build has no MPI or mpirun is not on PATH.
// Trap: the model has no batchnorm and no dropout: local batch statistics and per-rank dropout
// masks make two ranks differ from one by design, so the equivalence is checked without them
// (batchnorm is checked with dist.sync_batchnorm, on its own model).
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>

#include "app/app_util.h"
#include "checkpoint/safetensors.h"
#include "dist/communicator.h"
#include "support/catch.h"
#include "support/quick.h"
#include "support/test_util.h"
#include "checkpoint/checkpoint_state.h"

using namespace cnn;
using namespace cnn::test;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

// 101 training images (an odd tail: one rank gets one more sample than the other), no
// batchnorm, no dropout; SGD with momentum and weight decay.
const char* kNet = R"(name: dist_net
input: {channels: 1, height: 12, width: 12}
classes: [a, b, c, d]
layers:
  - {name: conv1, type: conv2d, filters: 4, kernel: 3, padding: 1}
  - {name: relu1, type: relu}
  - {name: pool1, type: maxpool, kernel: 2}
  - {name: conv2, type: conv2d, filters: 6, kernel: 3, padding: 1}
  - {name: relu2, type: relu}
  - {name: fc, type: dense, units: 4}
data: {format: synthetic, synthetic_size: 101}
train:
  epochs: 2
  batch_size: 8
  optimizer: {type: sgd, lr: 0.05, momentum: 0.9, weight_decay: 1.0e-4}
)";

std::string find_mpirun() {
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "";
  for (size_t start = 0; start <= p.size();) {
    size_t end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    fs::path candidate = fs::path(p.substr(start, end - start)) / "mpirun";
    if (!p.substr(start, end - start).empty() && access(candidate.c_str(), X_OK) == 0) return candidate.string();
    start = end + 1;
  }
  return "";
}

#define REQUIRE_MPIRUN()                                          \
  do {                                                            \
    if (!build_has_mpi()) CNN_SKIP("this build has no MPI");      \
    if (find_mpirun().empty()) CNN_SKIP("mpirun is not on PATH"); \
  } while (0)

struct Fixture {
  TempDir dir{"cnn-dist"};
  std::string model = (dir / "net.yaml").string();
  Fixture() { write_text_file(model, kNet); }
  std::string run_dir(const std::string& name) const { return (dir / name).string(); }
  std::string last(const std::string& name) const { return run_dir(name) + "/checkpoints/last.safetensors"; }
};

// How the ranks' messages travel: Open MPI's choice, or TCP only (between nodes it is the one
// transport every cluster has; ob1 is the point-to-point layer that uses the btl list, which UCX
// would bypass).
enum class Transport { default_, tcp };

Transport transport_of(const std::string& name) { return name == "tcp" ? Transport::tcp : Transport::default_; }

// `mpirun -np ranks cnn-train args...`; env entries become `-x NAME=VALUE`.
ProgramResult mpirun(int ranks, const std::vector<std::string>& args,
                     const std::vector<std::pair<std::string, std::string>>& env = {},
                     Transport transport = Transport::default_) {
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  std::vector<std::string> a{"--oversubscribe", "--allow-run-as-root", "-np", std::to_string(ranks)};
  if (transport == Transport::tcp)
    a.insert(a.end(), {"--mca", "pml", "ob1", "--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo"});
  for (const auto& [k, v] : env) a.insert(a.end(), {"-x", k + "=" + v});
  a.push_back(program_path("cnn-train"));
  a.insert(a.end(), args.begin(), args.end());
  return run_program(find_mpirun(), a);
}

ProgramResult train_plain(const std::vector<std::string>& args) { return run_program(program_path("cnn-train"), args); }

std::string host_name() {
  char name[256] = {0};
  gethostname(name, sizeof name - 1);
  return name;
}

// Every tensor of a and b within |a-b| <= rtol * max|b| of that tensor (+ a tiny floor);
// weights_only skips the optimizer slots.
std::string compare_checkpoints(const std::string& a, const std::string& b, double rtol, bool weights_only = false) {
  SafetensorsFile fa = SafetensorsFile::open(a), fb = SafetensorsFile::open(b);
  std::string out;
  for (const std::string& name : fa.names()) {
    if (weights_only && name.rfind("optim.", 0) == 0) continue;
    if (!fb.contains(name)) {
      out += "only in a: " + name + "\n";
      continue;
    }
    std::vector<float> x = fa.read_f32(name), y = fb.read_f32(name);
    if (x.size() != y.size()) {
      out += "size differs: " + name + "\n";
      continue;
    }
    double scale = 0, worst = 0;
    for (size_t i = 0; i < y.size(); ++i) scale = std::max(scale, double(std::fabs(y[i])));
    for (size_t i = 0; i < y.size(); ++i) worst = std::max(worst, std::fabs(double(x[i]) - double(y[i])));
    if (worst > rtol * scale + 1e-9) out += fmt::format("{}: max |a-b| {:.3g} vs max |b| {:.3g}\n", name, worst, scale);
  }
  return out;
}

}  // namespace

TEST_CASE("two ranks with batch B end with the weights of one rank with batch 2B", "[mpi][app]") {
  REQUIRE_MPIRUN();
  const Transport via = transport_of(GENERATE(as<std::string>(), "default", "tcp"));
  INFO("transport: " << (via == Transport::tcp ? "tcp" : "default"));
  Fixture fx;
  ProgramResult one = train_plain(
      {fx.model, "--device", "cpu", "--deterministic", "--batch", "16", "--out", fx.run_dir("one"), "--quiet"});
  INFO(one.describe());
  REQUIRE(one.exit_code == 0);
  ProgramResult two =
      mpirun(2, {fx.model, "--device", "cpu", "--deterministic", "--batch", "8", "--out", fx.run_dir("two")}, {}, via);
  INFO(two.describe());
  REQUIRE(two.exit_code == 0);
  CHECK_THAT(two.err, Contains("per-rank batch 8, global batch 16"));
  CHECK(compare_checkpoints(fx.last("one"), fx.last("two"), 1e-5) == "");
  CheckpointMeta a = read_checkpoint(fx.last("one")).meta, b = read_checkpoint(fx.last("two")).meta;
  CHECK(a.step == 14);  // 101 images, 16 a step: 7 steps an epoch, the last one of 5 (3 + 2)
  CHECK(b.step == a.step);
  CHECK(b.world_size == 2);
  // Only rank 0 wrote the run directory and printed the result.
  CHECK_THAT(two.out, Contains("run directory: "));
  CHECK(two.out.find("run directory: ") == two.out.rfind("run directory: "));
  // Epoch lines of a data-parallel run say how long a step waited for its gradient means; a plain
  // run's say nothing of it.
  int epochs = 0;
  for (const nlohmann::json& line : read_metrics(fx.run_dir("two"))) {
    if (line.value("event", "") != "epoch") continue;
    ++epochs;
    INFO(line.dump());
    REQUIRE(line.contains("allreduce_exposed_ms"));
    CHECK(line["allreduce_exposed_ms"].get<double>() > 0.0);  // MPI means block: all of it is exposed
    CHECK(line["allreduce_exposed_ms"].get<double>() < 10000.0);
  }
  CHECK(epochs == 2);
  CHECK_FALSE(last_event(read_metrics(fx.run_dir("one")), "epoch").contains("allreduce_exposed_ms"));
  // Buckets of ~996 floats: the first closes inside conv2 (after fc's 868 floats and one of conv2's
  // tensors). A boundary between a layer's weight and bias once made the buckets' ranges overlap.
  ProgramResult tiny = mpirun(2, {fx.model, "--device", "cpu", "--deterministic", "--batch", "8", "--out",
                                  fx.run_dir("tiny"), "--set", "dist.bucket_mb=0.0038"}, {}, via);
  INFO(tiny.describe());
  REQUIRE(tiny.exit_code == 0);
  CHECK(compare_checkpoints(fx.last("one"), fx.last("tiny"), 1e-5) == "");
}

TEST_CASE("linear lr_scaling gives two ranks twice the learning rate in the log and every epoch line", "[mpi][app]") {
  REQUIRE_MPIRUN();
  Fixture fx;
  const std::vector<std::string> sched{"--set", "train.lr_scaling=linear", "--set", "train.schedule.type=cosine",
                                       "--set", "train.schedule.warmup_epochs=1.5"};
  std::vector<std::string> args{fx.model, "--device", "cpu", "--deterministic", "--batch", "16", "--out",
                                fx.run_dir("one")};
  args.insert(args.end(), sched.begin(), sched.end());
  ProgramResult one = train_plain(args);
  INFO(one.describe());
  REQUIRE(one.exit_code == 0);
  CHECK(one.err.find("after train.lr_scaling") == std::string::npos);  // one process: nothing to scale
  args = {fx.model, "--device", "cpu", "--deterministic", "--batch", "8", "--out", fx.run_dir("two")};
  args.insert(args.end(), sched.begin(), sched.end());
  ProgramResult two = mpirun(2, args);
  INFO(two.describe());
  REQUIRE(two.exit_code == 0);
  CHECK_THAT(two.err, Contains("learning rate 0.05 -> 0.1 (train.lr_scaling: linear, world size 2); warmup over 1.5 "
                               "epochs still applies"));
  CHECK_THAT(two.err, Contains("; lr 0.1 after train.lr_scaling linear"));
  // Same steps per epoch (global batch 16 both times): each epoch's last-step lr (in warmup, then
  // in the cosine decay) is exactly twice the single process's.
  std::vector<double> lr_one, lr_two;
  for (const nlohmann::json& line : read_metrics(fx.run_dir("one")))
    if (line.value("event", "") == "epoch") lr_one.push_back(line["lr"].get<double>());
  for (const nlohmann::json& line : read_metrics(fx.run_dir("two")))
    if (line.value("event", "") == "epoch") lr_two.push_back(line["lr"].get<double>());
  REQUIRE(lr_one.size() == 2);
  REQUIRE(lr_two.size() == 2);
  CHECK(lr_one[0] < 0.05);  // still warming up after epoch 1
  for (size_t i = 0; i < 2; ++i) CHECK(lr_two[i] == Approx(2 * lr_one[i]).epsilon(1e-12));
}

TEST_CASE("one rank under mpirun takes the data-parallel path and matches the plain run", "[mpi][app]") {
  REQUIRE_MPIRUN();
  Fixture fx;
  ProgramResult plain = train_plain({fx.model, "--device", "cpu", "--deterministic", "--out", fx.run_dir("plain")});
  INFO(plain.describe());
  REQUIRE(plain.exit_code == 0);
  CHECK(plain.err.find("data-parallel") == std::string::npos);
  ProgramResult one = mpirun(1, {fx.model, "--device", "cpu", "--deterministic", "--out", fx.run_dir("one")});
  INFO(one.describe());
  REQUIRE(one.exit_code == 0);
  CHECK_THAT(one.err, Contains("data-parallel: 1 rank (mpi communicator"));
  CHECK(compare_checkpoints(fx.last("plain"), fx.last("one"), 1e-6) == "");
}

TEST_CASE("a rank killed mid-run ends the job within the timeout, naming the rank, its host, phase and step",
          "[mpi][app]") {
  REQUIRE_MPIRUN();
  const Transport via = transport_of(GENERATE(as<std::string>(), "default", "tcp"));
  INFO("transport: " << (via == Transport::tcp ? "tcp" : "default"));
  Fixture fx;
  auto t0 = std::chrono::steady_clock::now();
  ProgramResult r = mpirun(2, {fx.model, "--device", "cpu", "--out", fx.run_dir("kill"), "--set", "dist.timeout_s=5"},
                           {{"CNN_TEST_KILL_RANK", "1"}, {"CNN_TEST_KILL_AT_STEP", "3"}}, via);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(r.describe());
  CHECK(r.exit_code != 0);
  CHECK(seconds < 15);  // job start-up + 5 s at most; mpirun's tear-down usually ends it in ~1 s
  if (via == Transport::tcp && r.err.find("phase forward at step 3") == std::string::npos) {
    // Over TCP the survivor's Open MPI sees the dead peer's connection close and ends the process
    // itself ("peer process has unexpectedly disconnected": ob1 treats a lost connection as
    // fatal), often before our watchdog can speak; mpirun's summary names the failed rank.
    CHECK_THAT(r.err, Contains("Process name: [["));
    CHECK_THAT(r.err, Contains(",1]\n"));
    return;
  }
  CHECK_THAT(r.err, Contains("rank 1 (" + host_name() + ")"));
  CHECK_THAT(r.err, Contains("phase forward at step 3"));
  // Rank 0's watchdog ends the job (or answers the launcher's SIGTERM): its train.log says why.
  CHECK_THAT(read_text_file(fs::path(fx.run_dir("kill")) / "train.log"), Contains("error: watchdog: "));
}

TEST_CASE("a stalled rank ends the job after dist.timeout_s with the rank, host, phase and step", "[mpi][app]") {
  REQUIRE_MPIRUN();
  const Transport via = transport_of(GENERATE(as<std::string>(), "default", "tcp"));
  INFO("transport: " << (via == Transport::tcp ? "tcp" : "default"));
  Fixture fx;
  auto t0 = std::chrono::steady_clock::now();
  ProgramResult r =
      mpirun(2, {fx.model, "--device", "cpu", "--out", fx.run_dir("stall"), "--set", "dist.timeout_s=2"},
             {{"CNN_TEST_KILL_RANK", "1"}, {"CNN_TEST_KILL_AT_STEP", "3"}, {"CNN_TEST_KILL_MODE", "stall"}}, via);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(r.describe());
  CHECK(r.exit_code != 0);
  CHECK(seconds < 15);
  CHECK_THAT(r.err, Contains("made no progress"));
  CHECK_THAT(r.err, Contains("rank 1 (" + host_name() + ")"));
  CHECK_THAT(r.err, Contains("phase forward at step 3"));
  // Rank 0's watchdog ends the job (or answers the launcher's SIGTERM): its train.log says why.
  CHECK_THAT(read_text_file(fs::path(fx.run_dir("stall")) / "train.log"), Contains("error: watchdog: "));
}

TEST_CASE("a stop agreed by two ranks writes one checkpoint that resumes with one rank at the same sample",
          "[mpi][app]") {
  REQUIRE_MPIRUN();
  const Transport via = transport_of(GENERATE(as<std::string>(), "default", "tcp"));
  INFO("transport: " << (via == Transport::tcp ? "tcp" : "default"));
  Fixture fx;
  // Only rank 1 gets the signal; the per-step agreement stops both after the same step.
  ProgramResult stop = mpirun(2, {fx.model, "--device", "cpu", "--deterministic", "--out", fx.run_dir("run")},
                              {{"CNN_TEST_STOP_AT_STEP", "3"}, {"CNN_TEST_STOP_RANK", "1"}}, via);
  INFO(stop.describe());
  CHECK(stop.exit_code == 143);
  CHECK_THAT(stop.err, Contains("stopped by signal 15 after step 3"));
  CheckpointMeta m = read_checkpoint(fx.last("run")).meta;
  CHECK(m.world_size == 2);
  CHECK(m.step == 3);
  CHECK(m.next_batch == 3);  // global batches of 16
  ProgramResult resumed = train_plain({"--resume", fx.run_dir("run"), "--device", "cpu", "--deterministic"});
  INFO(resumed.describe());
  REQUIRE(resumed.exit_code == 0);
  CHECK_THAT(resumed.err, Contains("data cursor batch 3 of 16 samples -> batch 6 of 8 samples"));
  CheckpointMeta end = read_checkpoint(fx.last("run")).meta;
  CHECK(end.world_size == 1);
  CHECK(end.epoch == 2);
  // 3 steps of 16, then batches 6..12 of 8 to finish epoch 1, then 13 batches of 8.
  CHECK(end.step == 3 + 7 + 13);
}

TEST_CASE("a cursor with no matching batch boundary resumes at the next epoch with a warning", "[mpi][app]") {
  REQUIRE_MPIRUN();
  const Transport via = transport_of(GENERATE(as<std::string>(), "default", "tcp"));
  INFO("transport: " << (via == Transport::tcp ? "tcp" : "default"));
  Fixture fx;
  ProgramResult first = train_plain({fx.model, "--device", "cpu", "--max-steps", "3", "--out", fx.run_dir("run")});
  INFO(first.describe());
  REQUIRE(first.exit_code == 0);
  ProgramResult resumed = mpirun(2, {"--resume", fx.run_dir("run"), "--device", "cpu", "--max-steps", "0"}, {}, via);
  INFO(resumed.describe());
  REQUIRE(resumed.exit_code == 0);
  CHECK_THAT(resumed.err,
             Contains("epoch 1 stopped after 24 samples, which is no multiple of the new global batch 16"));
  CheckpointMeta end = read_checkpoint(fx.last("run")).meta;
  CHECK(end.world_size == 2);
  CHECK(end.step == 3 + 7);  // epoch 1 ends at once, epoch 2 has 7 global batches of 16
}

TEST_CASE("two fp16 ranks skip the same overflowing steps as one rank with twice the batch", "[mpi][app]") {
  REQUIRE_MPIRUN();
  Fixture fx;
  // Each rank's loss gradient is its local mean (1/8 a sample where one rank's is 1/16), so its
  // f16 activation gradients at scale S are one rank's at 2S, bit for bit (powers of two). From
  // 2^24 and 2^23 both overflow on the same steps; the ranks decide on the mean gradients, so
  // they agree on every skip, and the weights end where one rank's do.
  const std::vector<std::string> fp16{"--device", "cpu", "--deterministic", "--precision", "fp16"};
  std::vector<std::string> args{fx.model, "--batch", "16", "--out", fx.run_dir("one"), "--quiet",
                                "--set",  "train.loss_scale.init=16777216"};
  args.insert(args.end(), fp16.begin(), fp16.end());
  ProgramResult one = train_plain(args);
  INFO(one.describe());
  REQUIRE(one.exit_code == 0);
  args = {fx.model, "--batch", "8", "--out", fx.run_dir("two"), "--set", "train.loss_scale.init=8388608"};
  args.insert(args.end(), fp16.begin(), fp16.end());
  ProgramResult two = mpirun(2, args);
  INFO(two.describe());
  REQUIRE(two.exit_code == 0);
  const nlohmann::json a = last_event(read_metrics(fx.run_dir("one")), "end"),
                       b = last_event(read_metrics(fx.run_dir("two")), "end");
  CHECK(a["skipped_steps"].get<int64_t>() >= 2);
  CHECK(b["skipped_steps"] == a["skipped_steps"]);
  CHECK(b["loss_scale"].get<double>() * 2 == a["loss_scale"].get<double>());
  // Rank 0 alone reports each skip.
  size_t reports = 0;
  for (size_t at = two.err.find("gradients overflowed"); at != std::string::npos;
       at = two.err.find("gradients overflowed", at + 1))
    ++reports;
  CHECK(reports == size_t(b["skipped_steps"].get<int64_t>()));
  CHECK(compare_checkpoints(fx.last("one"), fx.last("two"), 1e-4) == "");
}

TEST_CASE("bf16 compression trains close to the uncompressed run but not identically", "[mpi][app]") {
  REQUIRE_MPIRUN();
  const Transport via = transport_of(GENERATE(as<std::string>(), "default", "tcp"));
  INFO("transport: " << (via == Transport::tcp ? "tcp" : "default"));
  Fixture fx;
  ProgramResult f = mpirun(2, {fx.model, "--device", "cpu", "--deterministic", "--out", fx.run_dir("f32")}, {}, via);
  INFO(f.describe());
  REQUIRE(f.exit_code == 0);
  ProgramResult h = mpirun(
      2, {fx.model, "--device", "cpu", "--deterministic", "--out", fx.run_dir("bf16"), "--set", "dist.compress=bf16"}, {}, via);
  INFO(h.describe());
  REQUIRE(h.exit_code == 0);
  CHECK_THAT(h.err, Contains("compress bf16"));
  CHECK(compare_checkpoints(fx.last("f32"), fx.last("bf16"), 2e-2, true) == "");
  CHECK(compare_checkpoints(fx.last("f32"), fx.last("bf16"), 0, true) != "");
}

// 97 images: the last global batch of each epoch has 1 sample, so rank 1 has none there and joins
// the batchnorm reductions with zeros. The model's batchnorm layers would make 2 x B differ from
// 1 x 2B with local statistics; with sync_batchnorm they see the global batch's.
const char* kBnNet = R"(name: dist_bn_net
input: {channels: 1, height: 12, width: 12}
classes: [a, b, c, d]
layers:
  - {name: conv1, type: conv2d, filters: 4, kernel: 3, padding: 1, bias: false}
  - {name: bn1, type: batchnorm}
  - {name: relu1, type: relu}
  - {name: pool1, type: maxpool, kernel: 2}
  - {name: conv2, type: conv2d, filters: 6, kernel: 3, padding: 1, bias: false}
  - {name: bn2, type: batchnorm, momentum: 0.3}
  - {name: tanh2, type: tanh}
  - {name: fc, type: dense, units: 4}
data: {format: synthetic, synthetic_size: 97}
train:
  epochs: 2
  batch_size: 8
  optimizer: {type: sgd, lr: 0.05, momentum: 0.9, weight_decay: 1.0e-4}
dist: {sync_batchnorm: true}
)";

TEST_CASE("two ranks with sync_batchnorm end with the weights and running statistics of one rank with batch 2B",
          "[mpi][app]") {
  REQUIRE_MPIRUN();
  const Transport via = transport_of(GENERATE(as<std::string>(), "default", "tcp"));
  INFO("transport: " << (via == Transport::tcp ? "tcp" : "default"));
  Fixture fx;
  const std::string model = (fx.dir / "bn.yaml").string();
  write_text_file(model, kBnNet);
  ProgramResult one =
      train_plain({model, "--device", "cpu", "--deterministic", "--batch", "16", "--out", fx.run_dir("one"), "--quiet"});
  INFO(one.describe());
  REQUIRE(one.exit_code == 0);
  ProgramResult two = mpirun(2, {model, "--device", "cpu", "--deterministic", "--batch", "8", "--out", fx.run_dir("two")}, {}, via);
  INFO(two.describe());
  REQUIRE(two.exit_code == 0);
  CHECK_THAT(two.err, Contains("sync batchnorm: on (2 layers)"));
  CHECK(compare_checkpoints(fx.last("one"), fx.last("two"), 1e-5) == "");
  CHECK(read_checkpoint(fx.last("two")).meta.step == 14);  // 97 images, 16 a step: 7 steps an epoch
  // Local statistics (the same run without the key) must not pass the same check, or it proves nothing.
  ProgramResult local = mpirun(2, {model, "--device", "cpu", "--deterministic", "--batch", "8", "--out",
                                   fx.run_dir("local"), "--set", "dist.sync_batchnorm=false"}, {}, via);
  INFO(local.describe());
  REQUIRE(local.exit_code == 0);
  CHECK_THAT(local.err, Contains("sync batchnorm: off"));
  CHECK(compare_checkpoints(fx.last("one"), fx.last("local"), 1e-5) != "");
}

TEST_CASE("cnn-train doctor reports every rank's libraries and the all-reduce bandwidth", "[mpi][app]") {
  REQUIRE_MPIRUN();
  const Transport via = transport_of(GENERATE(as<std::string>(), "default", "tcp"));
  INFO("transport: " << (via == Transport::tcp ? "tcp" : "default"));
  ProgramResult r = mpirun(2, {"doctor", "--device", "cpu", "--size-mb", "1", "--iters", "2"}, {}, via);
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("2 ranks (mpi communicator)"));
  CHECK_THAT(r.out, Contains("rank 0:"));
  CHECK_THAT(r.out, Contains("rank 1:"));
  CHECK_THAT(r.out, Contains("MPI"));
  CHECK_THAT(r.out, Contains("all-reduce probe (mpi, 1 MiB of float on cpu, 2 iterations)"));
  CHECK_THAT(r.out, Contains("GB/s"));
  CHECK_THAT(r.out, Contains("versions: the same on every rank"));
}

TEST_CASE("cnn-train doctor without a launcher reports the single process", "[app]") {
  ProgramResult r = run_program(program_path("cnn-train"), {"doctor", "--device", "cpu"});
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("1 rank (single communicator)"));
  CHECK_THAT(r.out, Contains("all-reduce probe: skipped"));
}

// One GPU rank under mpirun, NCCL: the forward, backward and gradient means are captured in a CUDA
// graph from the second step of each batch size (97 images, batch 8: 12 full batches and one of
// 1, each a graph of its own) and replayed; the replays give the bits of the uncaptured steps.
// Batchnorm with sync_batchnorm (NCCL float64 sums inside the graph) and dropout (seed and step
// read from device memory by the replays). Under CNN_TEST_QUICK (instrumented runs) both GPU cases
// train on 41 images (5 full batches and one of 1 an epoch on one rank), not 97.
const char* kGpuGraphNet = R"(name: dist_graph_net
input: {channels: 1, height: 12, width: 12}
classes: [a, b, c, d]
layers:
  - {name: conv1, type: conv2d, filters: 4, kernel: 3, padding: 1, bias: false}
  - {name: bn1, type: batchnorm}
  - {name: relu1, type: relu}
  - {name: drop1, type: dropout, p: 0.2}
  - {name: pool1, type: maxpool, kernel: 2}
  - {name: conv2, type: conv2d, filters: 6, kernel: 3, padding: 1}
  - {name: relu2, type: relu}
  - {name: fc, type: dense, units: 4}
data: {format: synthetic, synthetic_size: 97}
train:
  epochs: 2
  batch_size: 8
  deterministic: true
  optimizer: {type: adam, lr: 0.001}
dist: {sync_batchnorm: true, bucket_mb: 0.001}
)";

static int64_t gpu_graph_images() { return quick() ? 41 : 97; }

TEST_CASE("one gpu rank under mpirun captures the data-parallel step and ends with the weights of uncaptured steps",
          "[gpu][mpi][app]") {
  CNN_REQUIRE_GPU();
  REQUIRE_MPIRUN();
  if (!build_has_nccl()) CNN_SKIP("this build has no NCCL");
  Fixture fx;
  const std::string model = (fx.dir / "graph.yaml").string();
  write_text_file(model, kGpuGraphNet);
  const std::string images = "data.synthetic_size=" + std::to_string(gpu_graph_images());
  ProgramResult on = mpirun(1, {model, "--device", "cuda", "--set", images, "--out", fx.run_dir("on")});
  INFO(on.describe());
  REQUIRE(on.exit_code == 0);
  CHECK_THAT(on.err + on.out, Contains("CUDA graph: on (data-parallel step captured: "));
  ProgramResult off =
      mpirun(1, {model, "--device", "cuda", "--set", images, "--no-cuda-graph", "--out", fx.run_dir("off")});
  INFO(off.describe());
  REQUIRE(off.exit_code == 0);
  CHECK_THAT(off.err + off.out, Contains("CUDA graph: off (train.cuda_graph is false"));
  CHECK(compare_checkpoints(fx.last("on"), fx.last("off"), 0) == "");
  CheckpointMeta a = read_checkpoint(fx.last("on")).meta;
  CHECK(a.step == 2 * ((gpu_graph_images() + 7) / 8));  // 2 epochs of batch 8, the last batch short
}

// Two GPU ranks joined by NCCL's network transport, the path ranks on different nodes take: P2P
// and shared memory off, and on a one-GPU machine each rank a host of its own (NCCL_HOSTID; NCCL
// refuses two ranks of one host on one GPU), so NCCL joins two one-GPU "nodes" over sockets on the
// loopback interface. The captured data-parallel step holds NCCL's persistent network operations:
// the run must end (its graphs destroyed before the communicator: TrainSession), within a timeout
// that turns a hang into a failure (120 s; 600 s under CNN_TEST_QUICK, for instrumented ranks).
TEST_CASE("two gpu ranks over NCCL's network transport capture the step and train to the end", "[gpu][mpi][app]") {
  CNN_REQUIRE_GPU();
  REQUIRE_MPIRUN();
  if (!build_has_nccl()) CNN_SKIP("this build has no NCCL");
  if (access("/usr/bin/timeout", X_OK) != 0) CNN_SKIP("no /usr/bin/timeout to bound the run");
  Fixture fx;
  const std::string model = (fx.dir / "graph.yaml").string();
  write_text_file(model, kGpuGraphNet);
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  const std::vector<std::string> env{"-x", "NCCL_P2P_DISABLE=1", "-x", "NCCL_SHM_DISABLE=1", "-x",
                                     "NCCL_SOCKET_IFNAME=lo", "-x", "NCCL_DEBUG=INFO", "-x",
                                     "NCCL_DEBUG_SUBSYS=INIT,NET"};
  std::vector<std::string> a{"-k", "10", quick() ? "600" : "120", find_mpirun(), "--oversubscribe",
                             "--allow-run-as-root"};
  for (const char* host : {"cnn-node-a", "cnn-node-b"}) {  // one app context a rank, joined by ':'
    if (std::string(host) != "cnn-node-a") a.push_back(":");
    a.insert(a.end(), env.begin(), env.end());
    a.insert(a.end(), {"-np", "1", "-x", std::string("NCCL_HOSTID=") + host, program_path("cnn-train"), model,
                       "--device", "cuda", "--set", "data.synthetic_size=" + std::to_string(gpu_graph_images()),
                       "--out", fx.run_dir("net"), "--quiet"});
  }
  ProgramResult r = run_program("/usr/bin/timeout", a);
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err + r.out, Contains("via NET/"));
  const std::string log = read_text_file(fx.run_dir("net") + "/train.log");
  CHECK_THAT(log, Contains("data-parallel: 2 ranks"));
  CHECK_THAT(log, Contains("CUDA graph: on (data-parallel step captured: "));
  CHECK_THAT(log, Contains("epoch 2/2: train loss"));
  CHECK(fs::exists(fx.last("net")));
}
