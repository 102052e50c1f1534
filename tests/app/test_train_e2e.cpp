// End-to-end tests of cnn-train: the real program on data written by the test (FER2013 CSV, image
// folder, idx), the run directory it leaves, overfitting one batch, and its error paths.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>

#include "app_util.h"
#include "config/model_spec.h"
#include "layers/registry.h"
#include "data/gzip.h"
#include "data/image_io.h"
#include "data/sources.h"
#include "data/synthetic_faces.h"
#include "support/catch.h"
#include "support/test_util.h"

using namespace cnn;
using namespace cnn::test;
namespace fs = std::filesystem;

namespace {

// Runs cnn-train in `dir` and requires success.
ProgramResult train_ok(const TempDir& dir, const std::vector<std::string>& args) {
  ProgramResult r = run_program(program_path("cnn-train"), args, dir.path());
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);
  return r;
}

void check_epoch_line(const nlohmann::json& line) {
  INFO(line.dump());
  for (const char* key :
       {"event", "epoch", "step", "train_loss", "train_acc", "val_loss", "val_acc", "lr", "img_per_s", "elapsed_s",
        "process_s"})
    CHECK(line.contains(key));
}

}  // namespace

TEST_CASE("cnn-train on a FER2013 CSV leaves a complete run directory and prints test accuracy", "[cpu]") {
  TempDir dir;
  write_fer_csv(dir / "fer.csv", 256, 64, 64);
  write_text_file(dir / "model.yaml", small_model_yaml("fer2013-csv", "fer.csv"));
  ProgramResult r = train_ok(dir, {"model.yaml", "--out", "run", "--quiet"});
  INFO(r.describe());
  CHECK_THAT(r.out, Catch::Matchers::Contains("test accuracy: "));
  CHECK_THAT(r.out, Catch::Matchers::Contains("(64 images)"));
  CHECK_THAT(r.out, Catch::Matchers::Contains("checkpoint: run/checkpoints/last.safetensors"));
  CHECK_THAT(r.out, Catch::Matchers::Contains("happy"));  // the per-class table of the test split

  const fs::path run = dir / "run";
  CHECK(fs::exists(run / "train.log"));
  CHECK(fs::exists(run / "checkpoints" / "last.safetensors"));
  CHECK(fs::exists(run / "checkpoints" / "best.safetensors"));
  // config.yaml is the resolved config: it parses, and shows defaults the model file left out.
  const std::string config = read_text_file(run / "config.yaml");
  ModelSpec spec = parse_model_text(config, (run / "config.yaml").string());
  CHECK(spec.train.batch_size == 32);
  CHECK_THAT(config, Catch::Matchers::Contains("val_split"));
  CHECK_THAT(config, Catch::Matchers::Contains("weight_decay"));
  CHECK_THAT(config, Catch::Matchers::Contains("label_smoothing"));

  std::vector<nlohmann::json> lines = read_metrics(run);
  nlohmann::json epoch = last_event(lines, "epoch");
  REQUIRE(epoch.is_object());
  check_epoch_line(epoch);
  CHECK(epoch["epoch"] == 1);
  CHECK(epoch["step"] == 8);  // 256 images / batch 32
  CHECK(epoch["val_acc"].is_number());
  CHECK(last_event(lines, "test").is_object());
}

TEST_CASE("cnn-train reads an image folder of PNG files, resized to the model input", "[cpu]") {
  if (!image_io_available()) CNN_SKIP("this build has no OpenCV: image-folder data can't be read");
  TempDir dir;
  const std::vector<std::string> classes{"cat", "dog", "owl"};
  const int64_t per_split[3] = {8, 3, 3};
  const char* splits[3] = {"train", "val", "test"};
  for (int s = 0; s < 3; ++s) {
    // 20x20 RGB files for a 16x16 gray model: the loader converts and resizes.
    Dataset d = make_synthetic_faces(per_split[s] * 3, 3, 3, 20, 20, uint64_t(s + 5));
    for (int64_t i = 0; i < d.size(); ++i) {
      fs::path p = dir / "images" / splits[s] / classes[size_t(d.labels[size_t(i)])] / fmt::format("{:03d}.png", i);
      fs::create_directories(p.parent_path());
      write_image_file(p.string(), d.sample(i), 3, 20, 20);
    }
  }
  write_text_file(dir / "model.yaml",
                  "name: folder\ninput: {channels: 1, height: 16, width: 16}\nclasses: [cat, dog, owl]\nlayers:\n"
                  "  - {name: conv1, type: conv2d, filters: 4, kernel: 3, padding: 1}\n"
                  "  - {name: relu1, type: relu}\n  - {name: pool1, type: maxpool, kernel: 4}\n"
                  "  - {name: fc, type: dense, units: 3}\n"
                  "data: {format: image-folder, path: images}\n"
                  "train: {epochs: 2, batch_size: 8}\n");
  ProgramResult r = train_ok(dir, {"model.yaml", "--out", "run", "--quiet"});
  INFO(r.describe());
  CHECK_THAT(r.out, Catch::Matchers::Contains("test accuracy: "));
  CHECK_THAT(r.out, Catch::Matchers::Contains("(9 images)"));
  CHECK_THAT(r.out, Catch::Matchers::Contains("owl"));
  nlohmann::json epoch = last_event(read_metrics(dir / "run"), "epoch");
  REQUIRE(epoch.is_object());
  CHECK(epoch["epoch"] == 2);
  CHECK(epoch["step"] == 6);  // 24 train images in batches of 8, two epochs
}

TEST_CASE("cnn-train reads idx files, gzip-compressed or not, and carves val from train", "[cpu]") {
  TempDir dir;
  const fs::path idx = dir / "idx";
  fs::create_directories(idx);
  auto write_pair = [&](const std::string& stem, int64_t n, uint64_t seed, bool gz) {
    Dataset d = make_synthetic_faces(n, 7, 1, 28, 28, seed);
    std::vector<uint8_t> labels(d.labels.begin(), d.labels.end());
    std::vector<uint8_t> images = idx_file_bytes(d.pixels, n, 28, 28), lab = idx_file_bytes(labels, n, 0, 0);
    const std::string img_name = (idx / (stem + "-images-idx3-ubyte")).string();
    if (gz)
      write_gzip_file(img_name + ".gz", images.data(), images.size());
    else
      write_file_bytes(img_name, images.data(), images.size());
    write_file_bytes((idx / (stem + "-labels-idx1-ubyte")).string(), lab.data(), lab.size());
  };
  write_pair("train", 200, 3, true);
  write_pair("t10k", 30, 4, false);
  write_text_file(dir / "model.yaml", small_model_yaml("idx", "idx", 1, 28));
  ProgramResult r = train_ok(dir, {"model.yaml", "--out", "run", "--quiet", "--batch", "20"});
  INFO(r.describe());
  CHECK_THAT(r.out, Catch::Matchers::Contains("(30 images)"));
  nlohmann::json epoch = last_event(read_metrics(dir / "run"), "epoch");
  REQUIRE(epoch.is_object());
  check_epoch_line(epoch);
  CHECK(epoch["step"] == 9);  // val_split 0.1 leaves 180 train images: 9 batches of 20
}

TEST_CASE("cnn-train overfits one batch to 100% train accuracy", "[cpu]") {
  TempDir dir;
  write_text_file(dir / "model.yaml",
                  "name: overfit\ninput: {channels: 1, height: 12, width: 12}\n"
                  "classes: [angry, disgust, fear, happy, sad, surprise, neutral]\nlayers:\n"
                  "  - {name: conv1, type: conv2d, filters: 8, kernel: 3, padding: 1}\n"
                  "  - {name: relu1, type: relu}\n  - {name: pool1, type: maxpool, kernel: 2}\n"
                  "  - {name: fc, type: dense, units: 7}\n"
                  "data: {format: synthetic, synthetic_size: 16}\n"
                  "train: {epochs: 60, batch_size: 16, optimizer: {type: adam, lr: 0.01}, "
                  "checkpoint: {every_epochs: 0}}\n");
  ProgramResult r = train_ok(dir, {"model.yaml", "--out", "run", "--quiet", "--deterministic"});
  std::vector<nlohmann::json> lines = read_metrics(dir / "run");
  nlohmann::json first = nullptr, last = last_event(lines, "epoch");
  for (const auto& l : lines)
    if (l.value("event", "") == "epoch") {
      first = l;
      break;
    }
  REQUIRE(last.is_object());
  INFO(first.dump() << "\n" << last.dump());
  CHECK(last["epoch"] == 60);
  CHECK(last["step"] == 60);  // one batch an epoch
  CHECK(last["train_acc"].get<double>() == 1.0);
  CHECK(last["train_loss"].get<double>() < 0.1 * first["train_loss"].get<double>());
}

TEST_CASE("cnn-train reports an unknown model key with file:line:col and a suggestion, exit 2", "[cpu]") {
  TempDir dir;
  std::string model = small_model_yaml("synthetic", "");
  const std::string good = "stride: 2, padding: 1";
  model.replace(model.find(good), good.size(), "stride: 2, paddng: 1");
  write_text_file(dir / "bad.yaml", model);
  // The line and column of the misspelt key, counted in the text we wrote.
  const size_t at = model.find("paddng");
  const size_t line_start = model.rfind('\n', at) + 1;
  const int line = 1 + int(std::count(model.begin(), model.begin() + long(at), '\n'));
  const int col = 1 + int(at - line_start);
  ProgramResult r = run_program(program_path("cnn-train"), {"bad.yaml", "--out", "run"}, dir.path());
  INFO(r.describe());
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Matchers::Contains(fmt::format("cnn-train: error: bad.yaml:{}:{}", line, col)));
  CHECK_THAT(r.err, Catch::Matchers::Contains("did you mean 'padding'"));
  CHECK_FALSE(fs::exists(dir / "run" / "checkpoints" / "last.safetensors"));
}

TEST_CASE("cnn-train names a missing data file and fails", "[cpu]") {
  TempDir dir;
  write_text_file(dir / "model.yaml", small_model_yaml("fer2013-csv", "no/such/fer.csv"));
  ProgramResult r = run_program(program_path("cnn-train"), {"model.yaml", "--out", "run"}, dir.path());
  INFO(r.describe());
  CHECK((r.exit_code == 1 || r.exit_code == 2));
  CHECK_THAT(r.err, Catch::Matchers::Contains("cnn-train: error: "));
  CHECK_THAT(r.err, Catch::Matchers::Contains("no/such/fer.csv"));
}

TEST_CASE("cnn-train validate accepts every bundled model", "[cpu]") {
  std::vector<std::string> args{"validate"};
  for (const auto& e : fs::directory_iterator(fs::path(CNN_SOURCE_DIR) / "models"))
    if (e.path().extension() == ".yaml") args.push_back(e.path().string());
  REQUIRE(args.size() >= 5);
  ProgramResult r = run_program(program_path("cnn-train"), args);
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  for (size_t i = 1; i < args.size(); ++i) CHECK_THAT(r.out, Catch::Matchers::Contains("ok: " + args[i]));
}

TEST_CASE("cnn-train and cnn-eval answer --help and --version", "[cpu]") {
  for (const char* program : {"cnn-train", "cnn-eval"}) {
    ProgramResult help = run_program(program_path(program), {"--help"});
    INFO(help.describe());
    CHECK(help.exit_code == 0);
    CHECK_THAT(help.out, Catch::Matchers::Contains("--device"));
    ProgramResult version = run_program(program_path(program), {"--version"});
    INFO(version.describe());
    CHECK(version.exit_code == 0);
    CHECK_THAT(version.out, Catch::Matchers::Contains(std::string(program) + " " + CNN_VERSION));
  }
}

TEST_CASE("cnn-train with eval.test_every_epoch logs the test accuracy of every epoch", "[cpu]") {
  TempDir dir;
  write_fer_csv(dir / "fer.csv", 128, 32, 48);
  write_text_file(dir / "model.yaml", small_model_yaml("fer2013-csv", "fer.csv"));
  train_ok(dir, {"model.yaml", "--out", "run", "--quiet", "--epochs", "2", "--set", "eval.test_every_epoch=true"});
  std::vector<nlohmann::json> lines = read_metrics(dir / "run");
  int epochs = 0;
  for (const nlohmann::json& line : lines) {
    if (line.value("event", "") != "epoch") continue;
    ++epochs;
    INFO(line.dump());
    REQUIRE(line.contains("test_acc"));
    // 48 test images: the accuracy is a multiple of 1/48.
    const double hits = line["test_acc"].get<double>() * 48;
    CHECK(hits == Approx(std::round(hits)).margin(1e-9));
    CHECK(line["test_loss"].get<double>() > 0);
  }
  CHECK(epochs == 2);
  // The start line says when training began on elapsed_s's clock: before the first epoch ended.
  nlohmann::json start = last_event(lines, "start");
  REQUIRE(start.is_object());
  CHECK(start["setup_s"].get<double>() > 0.0);
  CHECK(start["setup_s"].get<double>() < last_event(lines, "epoch")["elapsed_s"].get<double>());
  // The final test evaluation equals the last epoch's (same weights, same loader).
  CHECK(last_event(lines, "test")["test_acc"].get<double>() == Approx(last_event(lines, "epoch")["test_acc"].get<double>()));
  // Without the key, epoch lines carry no test figures.
  train_ok(dir, {"model.yaml", "--out", "run2", "--quiet"});
  CHECK_FALSE(last_event(read_metrics(dir / "run2"), "epoch").contains("test_acc"));
}
