// The start-up breakdown of a real cnn-train run: one block in train.log and the end line's
// "startup" object, with the phases in order from the process start, summing to the total, no
// longer than the process lived, the GPU-only phases absent on the CPU (never zero), and the first
// epoch's extra cost split into parts that sum to it; on a GPU, the autotune cache cold then warm.
// Also tools/time_to_accuracy.py's smoke test on the cpu (tiny generated IDX data, one epoch).
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "app_util.h"
#include "data/gzip.h"
#include "data/image_io.h"
#include "data/sources.h"
#include "data/synthetic_faces.h"
#include "support/catch.h"
#include "support/test_util.h"

using namespace cnn::test;
using Catch::Matchers::Contains;

namespace {

const char* kModel =
    "name: startup_e2e\n"
    "input: {channels: 1, height: 8, width: 8}\n"
    "layers:\n"
    "  - {name: conv1, type: conv2d, filters: 4, kernel: 3, padding: 1}\n"
    "  - {name: bn1, type: batchnorm}\n"
    "  - {name: relu1, type: relu}\n"
    "  - {name: fc, type: dense, units: 3}\n"
    "data: {format: synthetic, synthetic_size: 48}\n"
    "train: {epochs: 3, batch_size: 8, optimizer: {type: sgd, lr: 0.05}}\n";

struct Run {
  std::filesystem::path dir;
  std::string out;
  ProgramResult result;
  double wall_s = 0;  // the parent's measure of the process's life
  nlohmann::json startup;
  std::string log;
};

Run train(const TempDir& dir, const std::string& out, const std::vector<std::string>& extra,
          const std::vector<std::string>& env = {}) {
  std::vector<std::string> args = env;
  args.insert(args.end(), {program_path("cnn-train"), "m.yaml", "--out", out, "--quiet"});
  args.insert(args.end(), extra.begin(), extra.end());
  Run r;
  r.dir = dir.path();
  r.out = out;
  const auto t0 = std::chrono::steady_clock::now();
  r.result = run_program("/usr/bin/env", args, dir.path());
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (r.result.exit_code == 0) {
    r.startup = last_event(read_metrics(dir / out), "end")["startup"];
    r.log = read_text_file(dir / out / "train.log");
  }
  return r;
}

const nlohmann::json* phase(const nlohmann::json& startup, const std::string& name) {
  for (const auto& p : startup["phases"])
    if (p["name"] == name) return &p;
  return nullptr;
}

const char* kDataBeside = "data load and decode (beside the device set-up)";

// The main line's phases in order, each starting where the last present one ended, summing to the
// total; the data read beside them listed where it began, and ended before the wait for it did.
void check_consistent(const Run& r) {
  const nlohmann::json& s = r.startup;
  REQUIRE(s.is_object());
  double at = 0, previous_start = 0;
  for (const auto& p : s["phases"]) {
    INFO(p.dump());
    CHECK(p["start_s"].get<double>() >= previous_start - 1e-9);  // listed in the order they began
    previous_start = p["start_s"].get<double>();
    if (p.value("beside", false)) {
      const nlohmann::json* wait = phase(s, "waiting for the data");
      REQUIRE(wait);
      CHECK(p["seconds"].get<double>() >= 0);
      CHECK(p["start_s"].get<double>() >= phase(s, "graph build")->at("start_s").get<double>());
      CHECK(p["start_s"].get<double>() + p["seconds"].get<double>() <=
            wait->at("start_s").get<double>() + wait->at("seconds").get<double>() + 1e-6);
      continue;
    }
    CHECK(p["start_s"].get<double>() == Approx(at).margin(1e-9));
    if (p["seconds"].is_null()) {
      CHECK(!p["absent"].get<std::string>().empty());
      continue;
    }
    CHECK(p["seconds"].get<double>() >= 0);
    at += p["seconds"].get<double>();
  }
  CHECK(s["total_s"].get<double>() == Approx(at).margin(1e-9));
  // The OS start time is known to a clock tick (10 ms): the total cannot exceed the process's life.
  CHECK(s["total_s"].get<double>() <= r.wall_s + 0.01);
  const nlohmann::json& f = s["first_epoch"];
  REQUIRE(f.is_object());
  double parts = 0;
  for (const auto& p : f["parts"]) parts += p["seconds"].get<double>();
  CHECK(parts == Approx(f["extra_s"].get<double>()).margin(1e-9));
  CHECK(f["extra_s"].get<double>() == Approx(f["seconds"].get<double>() - f["later_median_s"].get<double>()));
  CHECK(f["later_epochs"] == 2);
  // The epoch lines' process_s is on the same clock: epoch 1 ends after the start-up, before its
  // checkpoints are written.
  const nlohmann::json epoch1 = read_metrics(r.dir / r.out)[1];
  REQUIRE(epoch1["event"] == "epoch");
  CHECK(epoch1["process_s"].get<double>() >= s["total_s"].get<double>());
  CHECK(epoch1["process_s"].get<double>() <= f["ends_at_s"].get<double>());
}

}  // namespace

TEST_CASE("cnn-train logs its start-up breakdown and writes it into the end line, GPU phases absent on the cpu",
          "[cpu]") {
  TempDir dir("cnn-startup");
  write_text_file(dir / "m.yaml", kModel);
  Run r = train(dir, "run", {"--device", "cpu"});
  INFO(r.result.describe());
  REQUIRE(r.result.exit_code == 0);
  INFO(r.log);
  check_consistent(r);
  // The phases a CPU run goes through, in this order (absent ones included).
  const std::vector<std::string> order{"exec, shared libraries (load, init)",
                                       "static initialisers to main",
                                       "command line, logging",
                                       "config load (YAML)",
                                       "MPI init",
                                       "graph build",
                                       "device choice",
                                       "run directory",
                                       "CUDA context creation",
                                       "CUDA stream",
                                       "cuBLAS handle and workspace",
                                       "CPU context (threads, BLAS)",
                                       "autotune",
                                       "memory plan and allocation",
                                       "weight initialisation",
                                       "waiting for the data",
                                       "data upload to the GPU",
                                       "data loaders",
                                       "optimizer, loss, step, logs",
                                       "NCCL and reducers",
                                       "config.yaml, weights, start line",
                                       "first step (uncaptured)",
                                       "CUDA graph capture",
                                       "CUDA graph instantiation"};
  std::vector<nlohmann::json> phases;  // the main line's
  for (const auto& p : r.startup["phases"])
    if (!p.value("beside", false)) phases.push_back(p);
  REQUIRE(phases.size() == order.size());
  for (size_t i = 0; i < order.size(); ++i) CHECK(phases[i]["name"] == order[i]);
  // The synthetic data is read beside the device set-up, on its own thread: one phase, not in the sum.
  REQUIRE(r.startup["phases"].size() == order.size() + 1);
  REQUIRE(phase(r.startup, kDataBeside));
  CHECK(phase(r.startup, kDataBeside)->at("beside") == true);
  CHECK(phase(r.startup, "waiting for the data")->at("seconds").get<double>() >= 0);
  CHECK_THAT(r.log, Contains("  | " + std::string(kDataBeside) + " "));
  for (const char* gpu : {"CUDA context creation", "CUDA stream", "cuBLAS handle and workspace",
                          "data upload to the GPU", "CUDA graph capture",
                          "CUDA graph instantiation"}) {
    INFO(gpu);
    REQUIRE(phase(r.startup, gpu));
    CHECK(phase(r.startup, gpu)->at("seconds").is_null());
    CHECK(phase(r.startup, gpu)->at("absent") == "CPU run");
  }
  CHECK(phase(r.startup, "MPI init")->at("seconds").is_null());
  CHECK(phase(r.startup, "NCCL and reducers")->at("seconds").is_null());
  CHECK(r.startup["steady_from_step"] == 2);
  CHECK(r.startup["facts"]["autotune"]["cache"].is_null());  // the CPU keeps no autotune cache
  CHECK(r.startup["facts"]["autotune"]["timed"] == 0);

  // One block in train.log, its lines in the same order, the absent ones said so.
  const size_t block = r.log.find("info: start-up, seconds since the process start");
  REQUIRE(block != std::string::npos);
  CHECK(r.log.find("info: start-up, seconds since", block + 1) == std::string::npos);
  size_t at = block;
  for (const std::string& name : order) {
    const size_t next = r.log.find("  " + name + " ", at);
    INFO(name);
    CHECK(next != std::string::npos);
    if (next != std::string::npos) at = next;
  }
  CHECK_THAT(r.log, Contains("absent  (CPU run)"));
  CHECK_THAT(r.log, Contains("step 2 is the first at steady speed"));
  CHECK_THAT(r.log, Contains(", the median of 2 later epochs: "));
  CHECK_THAT(r.log, Contains("start to the end of epoch 1: "));
}

TEST_CASE("a one-epoch run says the first epoch's extra cost is absent, not zero", "[cpu]") {
  TempDir dir("cnn-startup-one");
  write_text_file(dir / "m.yaml", kModel);
  Run r = train(dir, "run", {"--device", "cpu", "--epochs", "1"});
  INFO(r.result.describe());
  REQUIRE(r.result.exit_code == 0);
  CHECK(r.startup["first_epoch"].is_null());
  CHECK(r.startup["first_epoch_absent"] == "no later epoch to compare with");
  CHECK_THAT(r.log, Contains("first epoch's extra cost: absent (no later epoch to compare with)"));
}

TEST_CASE("on a GPU the start-up breakdown times the CUDA phases and sees the autotune cache cold, then warm",
          "[gpu]") {
  CNN_REQUIRE_GPU();
  TempDir dir("cnn-startup-gpu");
  write_text_file(dir / "m.yaml", kModel);
  const std::vector<std::string> env{"CNN_AUTOTUNE_CACHE=" + (dir / "autotune.json").string()};
  Run cold = train(dir, "cold", {"--device", "cuda"}, env);
  INFO(cold.result.describe());
  REQUIRE(cold.result.exit_code == 0);
  INFO(cold.log);
  check_consistent(cold);
  for (const char* name : {"CUDA context creation", "CUDA stream", "cuBLAS handle and workspace",
                           "data upload to the GPU", "CUDA graph capture",
                           "CUDA graph instantiation"}) {
    INFO(name);
    REQUIRE(phase(cold.startup, name));
    CHECK(phase(cold.startup, name)->at("seconds").is_number());
  }
  CHECK(cold.startup["steady_from_step"] == 3);
  // The first step's slowest layers are its parts, each timed (their kernels' first launches).
  int first_step_layers = 0;
  for (const auto& p : cold.startup["phases"])
    if (p["name"].get<std::string>().rfind("first step: '", 0) == 0) {
      CHECK(p["seconds"].get<double>() >= 0);
      ++first_step_layers;
    }
  CHECK(first_step_layers >= 1);
  CHECK(first_step_layers <= 4);
  CHECK_THAT(cold.log, Contains("first launches"));
  CHECK(cold.startup["facts"]["autotune"]["hits"] == 0);
  CHECK(cold.startup["facts"]["autotune"]["timed"].get<int>() > 0);
  Run warm = train(dir, "warm", {"--device", "cuda"}, env);
  INFO(warm.result.describe());
  REQUIRE(warm.result.exit_code == 0);
  check_consistent(warm);
  CHECK(warm.startup["facts"]["autotune"]["timed"] == 0);
  CHECK(warm.startup["facts"]["autotune"]["hits"] == cold.startup["facts"]["autotune"]["timed"]);
  CHECK_THAT(warm.log, Contains("(cache warm: "));
}

namespace {

// IDX files of `n` random 28x28 images with labels 0-9 (Fashion-MNIST's layout), for `prefix`
// "train" or "t10k".
void write_idx_pair(const std::filesystem::path& dir, const std::string& prefix, uint32_t n, uint32_t seed) {
  auto be = [](uint32_t v) {
    return std::string{char(v >> 24), char((v >> 16) & 255), char((v >> 8) & 255), char(v & 255)};
  };
  std::string images = std::string("\0\0\x08\x03", 4) + be(n) + be(28) + be(28);
  std::string labels = std::string("\0\0\x08\x01", 4) + be(n);
  uint32_t x = seed;
  for (uint32_t i = 0; i < n; ++i) {
    labels += char(i % 10);
    for (int k = 0; k < 28 * 28; ++k) {
      x = x * 1664525u + 1013904223u;
      images += char((x >> 24) / 2 + 12 * (i % 10));  // a little class signal on top of noise
    }
  }
  write_text_file(dir / (prefix + "-images-idx3-ubyte"), images);
  write_text_file(dir / (prefix + "-labels-idx1-ubyte"), labels);
}

}  // namespace

TEST_CASE("time_to_accuracy.py times ours (cold and warm cache) and PyTorch eager from process start on the cpu",
          "[cpu]") {
  if (std::system("/usr/bin/python3 -c 'import torch, yaml, numpy' >/dev/null 2>&1") != 0)
    CNN_SKIP("/usr/bin/python3 with python3-torch, python3-yaml and python3-numpy is not installed");
  TempDir dir("cnn-tta");
  std::filesystem::create_directories(dir / "idx");
  write_idx_pair(dir / "idx", "train", 96, 1);
  write_idx_pair(dir / "idx", "t10k", 40, 2);
  const std::string script = std::string(CNN_SOURCE_DIR) + "/tools/time_to_accuracy.py";
  const std::string model = std::string(CNN_SOURCE_DIR) + "/models/fashion_cnn.yaml";
  ProgramResult r = run_program("/usr/bin/python3",
                                {script, model, "--cnn-train", program_path("cnn-train"), "--device", "cpu", "--data",
                                 (dir / "idx").string(), "--subset", "64", "--max-epochs", "1", "--batch", "16",
                                 "--threads", "1", "--target", "0.05", "--json", "tta.json"},
                                dir.path());
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("pytorch eager"));
  CHECK_THAT(r.out, Contains("ratio ours (warm cache) / pytorch eager"));
  const nlohmann::json j = nlohmann::json::parse(read_text_file(dir / "tta.json"));
  CHECK(j["model"] == "fashion_cnn");
  CHECK(j["epochs"] == 1);
  REQUIRE(j["sides"].size() == 3);
  CHECK(j["sides"][0]["cache"] == "cold");
  CHECK(j["sides"][1]["cache"] == "warm");
  CHECK(j["sides"][2]["name"] == "pytorch eager");
  for (const auto& side : j["sides"]) {
    INFO(side.dump());
    REQUIRE(side["runs"].size() == 1);
    const nlohmann::json& run = side["runs"][0];
    REQUIRE(run["epochs"].size() == 1);
    const double end = run["epochs"][0]["end_s"].get<double>();
    CHECK(end > 0);
    CHECK(end <= run["process_wall_s"].get<double>() + 0.01);  // from the process start, within its life
    CHECK(run["epoch_seconds"][0].get<double>() == Approx(end));
  }
  CHECK(j["sides"][0]["runs"][0]["startup"]["total_s"].get<double>() > 0);  // ours keeps its breakdown

  // What PyTorch's side does not mirror is refused before anything runs.
  ProgramResult bad = run_program("/usr/bin/python3",
                                  {script, model, "--cnn-train", program_path("cnn-train"), "--device", "cpu", "--data",
                                   (dir / "idx").string(), "--set", "data.augment.hflip=true"},
                                  dir.path());
  CHECK(bad.exit_code == 1);
  CHECK_THAT(bad.err, Contains("time_to_accuracy: error: data.augment is not mirrored"));
}

namespace {

// A one-layer model on the IDX folder `idx` (28x28, 10 classes) of `channels` channels.
std::string idx_model(const std::filesystem::path& idx, int channels = 1) {
  return "name: idx_errors\n"
         "input: {channels: " + std::to_string(channels) + ", height: 28, width: 28}\n"
         "layers:\n"
         "  - {name: fc, type: dense, units: 10}\n"
         "data: {format: idx, path: '" + idx.string() + "'}\n"
         "train: {epochs: 1, batch_size: 8, optimizer: {type: sgd, lr: 0.05}}\n";
}

// What load_idx(dir) throws in this process ("" when it throws nothing).
std::string idx_error(const std::string& dir) {
  try {
    cnn::load_idx(dir);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// cnn-train on m.yaml in `dir` on `device`: its exit code, stderr and train.log.
struct Failed {
  ProgramResult result;
  std::string log;
};
Failed train_failing(const TempDir& dir, const std::string& device) {
  Failed f;
  std::filesystem::remove_all(dir / "run");
  f.result = run_program(program_path("cnn-train"), {"m.yaml", "--out", "run", "--quiet", "--device", device},
                         dir.path());
  if (std::filesystem::exists(dir / "run" / "train.log")) f.log = read_text_file(dir / "run" / "train.log");
  return f;
}

// The data errors of the data thread, on `device`: the reader's own message (as load_idx throws it
// in this process), first on stderr, and exit 1; a config error of the data's, exit 2. Each is in
// train.log too, as when the data was read before the device set-up.
void check_data_errors(const std::string& device) {
  TempDir dir("cnn-data-thread-errors");
  const std::filesystem::path idx = dir / "idx";
  std::filesystem::create_directories(idx);
  write_idx_pair(idx, "train", 40, 1);  // no t10k files
  write_text_file(dir / "m.yaml", idx_model(idx));
  const std::string missing = idx_error(idx.string());
  REQUIRE(missing.find("neither t10k-images-idx3-ubyte nor t10k-images-idx3-ubyte.gz exists") != std::string::npos);
  Failed f = train_failing(dir, device);
  INFO(f.result.describe());
  CHECK(f.result.exit_code == 1);
  CHECK(f.result.err.rfind("cnn-train: error: " + missing + "\n", 0) == 0);
  CHECK_THAT(f.log, Contains(missing));

  write_idx_pair(idx, "t10k", 20, 2);
  const std::filesystem::path images = idx / "t10k-images-idx3-ubyte";
  const std::string bytes = read_text_file(images);
  std::filesystem::remove(images);
  cnn::write_gzip_file(images.string() + ".gz", bytes.data(), bytes.size());
  const std::string gz = read_text_file(images.string() + ".gz");
  write_text_file(images.string() + ".gz", gz.substr(0, gz.size() - 5));  // trailer cut
  const std::string truncated = idx_error(idx.string());
  REQUIRE(truncated.find(": truncated gzip data") != std::string::npos);
  f = train_failing(dir, device);
  INFO(f.result.describe());
  CHECK(f.result.exit_code == 1);
  CHECK(f.result.err.rfind("cnn-train: error: " + truncated + "\n", 0) == 0);
  CHECK_THAT(f.log, Contains(truncated));

  write_text_file(images.string() + ".gz", gz);
  write_text_file(dir / "m.yaml", idx_model(idx, 2));  // the data readers refuse 2 channels
  f = train_failing(dir, device);
  INFO(f.result.describe());
  CHECK(f.result.exit_code == 2);
  CHECK_THAT(f.result.err, Contains("'input.channels': data loaders read 1 (gray) or 3 (RGB) channels, got 2"));
  CHECK_THAT(f.log, Contains("data loaders read 1 (gray) or 3 (RGB) channels, got 2"));
}

}  // namespace

TEST_CASE("a data error met on the data thread ends cnn-train as an in-line read did (cpu)", "[cpu]") {
  check_data_errors("cpu");
}

TEST_CASE("a data error met on the data thread ends cnn-train as an in-line read did (cuda)", "[gpu]") {
  CNN_REQUIRE_GPU();
  check_data_errors("cuda");
}

TEST_CASE("image-folder data is read in line, before the device set-up, and the breakdown says so", "[cpu]") {
  if (!cnn::image_io_available()) CNN_SKIP("this build has no OpenCV: image-folder data can't be read");
  TempDir dir("cnn-startup-folder");
  const char* classes[3] = {"a", "b", "c"};
  cnn::Dataset d = cnn::make_synthetic_faces(12, 3, 1, 8, 8, 5);
  for (int64_t i = 0; i < d.size(); ++i) {
    const std::filesystem::path p = dir / "images" / "train" / classes[d.labels[size_t(i)]] / (std::to_string(i) + ".png");
    std::filesystem::create_directories(p.parent_path());
    cnn::write_image_file(p.string(), d.sample(i), 1, 8, 8);
  }
  std::string model = kModel;
  model.replace(model.find("data: {format: synthetic, synthetic_size: 48}"),
                std::string("data: {format: synthetic, synthetic_size: 48}").size(), "data: {format: image-folder, path: images}");
  write_text_file(dir / "m.yaml", model);
  Run r = train(dir, "run", {"--device", "cpu"});
  INFO(r.result.describe());
  REQUIRE(r.result.exit_code == 0);
  check_consistent(r);
  for (const auto& p : r.startup["phases"]) CHECK(!p.value("beside", false));
  REQUIRE(phase(r.startup, "data load and decode"));
  CHECK(phase(r.startup, "data load and decode")->at("seconds").get<double>() >= 0);
  CHECK(phase(r.startup, "data load and decode")->at("start_s").get<double>() <=
        phase(r.startup, "CPU context (threads, BLAS)")->at("start_s").get<double>());
  REQUIRE(phase(r.startup, "waiting for the data"));
  CHECK(phase(r.startup, "waiting for the data")->at("seconds").is_null());
  CHECK_THAT(phase(r.startup, "waiting for the data")->at("absent").get<std::string>(), Contains("image-folder"));
  CHECK(!r.startup["facts"].contains("data"));
}
