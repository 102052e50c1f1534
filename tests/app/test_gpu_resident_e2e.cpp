// End-to-end tests of the GPU-resident batch in the model input's 16-bit dtype: cnn-train in bf16
// and fp16 writes the same metrics with data.gpu_resident on (batches stored 16-bit by the augment
// kernel, no input cast in the step) and off (host f32 batches cast in the step), and its captured
// step has one node fewer; cnn-bench model stores its synthetic batch the same way (input_dtype in
// its JSON) unless data.gpu_resident is off, and on the CPU always in f32.
#include <regex>
#include <string>
#include <vector>

#include "app_util.h"
#include "support/catch.h"
#include "support/quick.h"
#include "support/test_util.h"

using namespace cnn;
using namespace cnn::test;
using Catch::Matchers::Contains;

namespace {

// Three channels (so channels-last differs from NCHW), RGB synthetic faces, no augmentation (the
// GPU and host batches are then equal bit for bit in f32), a val split evaluated every epoch.
const char* kModel =
    "name: resident_e2e\n"
    "input: {channels: 3, height: 10, width: 10}\n"
    "layers:\n"
    "  - {name: conv1, type: conv2d, filters: 8, kernel: 3, padding: 1}\n"
    "  - {name: bn1, type: batchnorm}\n"
    "  - {name: relu1, type: relu}\n"
    "  - {name: pool1, type: maxpool, kernel: 2}\n"
    "  - {name: fc, type: dense, units: 3}\n"
    "data: {format: synthetic, synthetic_size: 48}\n"
    "train: {epochs: 3, batch_size: 8, deterministic: true, optimizer: {type: sgd, lr: 0.05, momentum: 0.9}}\n";

ProgramResult train(const TempDir& dir, const std::string& out, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"m.yaml", "--out", out, "--device", "cuda"};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_program(program_path("cnn-train"), args, dir.path());
}

// N of the first "step captured, N nodes" in `log`, or -1.
long captured_nodes(const std::string& log) {
  std::smatch m;
  return std::regex_search(log, m, std::regex("step captured, ([0-9]+) nodes")) ? std::stol(m[1]) : -1;
}

nlohmann::json bench_json(const TempDir& dir, const std::string& device, const std::vector<std::string>& extra) {
  std::vector<std::string> args{"model",  "m.yaml", "--device", device,   "--steps", "3",
                                "--repeats", "1",   "--warmup", "2",      "--json",  "b.json"};
  args.insert(args.end(), extra.begin(), extra.end());
  ProgramResult r = run_program(program_path("cnn-bench"), args, dir.path());
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);
  return nlohmann::json::parse(read_text_file(dir / "b.json"));
}

}  // namespace

// Under CNN_TEST_QUICK (instrumented runs) 2 epochs, not 3: the first still captures, the second replays.
TEST_CASE("cnn-train in bf16 and fp16 writes the same metrics with 16-bit GPU-resident batches as with host ones",
          "[gpu]") {
  CNN_REQUIRE_GPU();
  const std::string precision = GENERATE(as<std::string>(), "bf16", "fp16");
  INFO(precision);
  TempDir dir("cnn-resident-e2e");
  write_text_file(dir / "m.yaml", kModel);
  const int n_epochs = quick() ? 2 : 3;
  const std::string epochs_arg = std::to_string(n_epochs);
  ProgramResult on =
      train(dir, "on", {"--precision", precision, "--set", "data.gpu_resident=on", "--epochs", epochs_arg});
  INFO(on.describe());
  REQUIRE(on.exit_code == 0);
  CHECK_THAT(on.out + on.err, Contains("training images resident on the GPU"));
  ProgramResult off =
      train(dir, "off", {"--precision", precision, "--set", "data.gpu_resident=off", "--epochs", epochs_arg});
  INFO(off.describe());
  REQUIRE(off.exit_code == 0);
  // The host batch is cast in the captured step; the resident one is stored as conv1 reads it.
  const long nodes_on = captured_nodes(on.out + on.err), nodes_off = captured_nodes(off.out + off.err);
  CHECK(nodes_on > 0);
  CHECK(nodes_on + 1 == nodes_off);
  const std::vector<nlohmann::json> a = read_metrics(dir / "on"), b = read_metrics(dir / "off");
  REQUIRE(a.size() == b.size());
  int epochs = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].value("event", "") != "epoch") continue;
    ++epochs;
    for (const char* key : {"epoch", "step", "train_loss", "train_acc", "val_loss", "val_acc"}) {
      INFO("line " << i << " key " << key << ": " << a[i][key] << " against " << b[i][key]);
      CHECK(a[i][key] == b[i][key]);
    }
  }
  CHECK(epochs == n_epochs);
}

TEST_CASE("cnn-bench model stores a bf16 run's synthetic batch in bf16 on a GPU unless data.gpu_resident is off",
          "[gpu]") {
  CNN_REQUIRE_GPU();
  TempDir dir("cnn-resident-bench");
  write_text_file(dir / "m.yaml", kModel);
  const nlohmann::json fed = bench_json(dir, "cuda", {"--precision", "bf16"});
  const nlohmann::json cast = bench_json(dir, "cuda", {"--precision", "bf16", "--set", "data.gpu_resident=off"});
  CHECK(fed["input_dtype"] == "bf16");
  CHECK(cast["input_dtype"] == "f32");
  const long nodes_fed = captured_nodes(fed["cuda_graph"].get<std::string>());
  CHECK(nodes_fed > 0);
  CHECK(nodes_fed + 1 == captured_nodes(cast["cuda_graph"].get<std::string>()));
  CHECK(bench_json(dir, "cuda", {})["input_dtype"] == "f32");  // fp32: nothing to store in 16 bits
}

TEST_CASE("cnn-bench model keeps the synthetic batch f32 on the CPU, where training has no GPU-resident data",
          "[cpu]") {
  TempDir dir("cnn-resident-bench-cpu");
  write_text_file(dir / "m.yaml", kModel);
  const nlohmann::json j = bench_json(dir, "cpu", {"--precision", "bf16", "--batch", "4"});
  CHECK(j["precision"] == "bf16");
  CHECK(j["input_dtype"] == "f32");
}
