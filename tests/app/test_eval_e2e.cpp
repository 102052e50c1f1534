// End-to-end tests of cnn-eval: a run trained by the real cnn-train, evaluated and used to
// classify images by the real cnn-eval; the report must agree with itself and with the trainer.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "app_util.h"
#include "data/dataset.h"
#include "data/face_detect.h"
#include "data/image_io.h"
#include "data/synthetic_faces.h"
#include "support/catch.h"
#include "support/test_util.h"

using namespace cnn;
using namespace cnn::test;
namespace fs = std::filesystem;

namespace {

// A FER2013 CSV (256 / 64 / 64 rows) and one epoch of training on it in dir/run.
void train_fer_run(const TempDir& dir) {
  write_fer_csv(dir / "fer.csv", 256, 64, 64);
  write_text_file(dir / "model.yaml", small_model_yaml("fer2013-csv", "fer.csv"));
  ProgramResult r = run_program(program_path("cnn-train"), {"model.yaml", "--out", "run", "--quiet"}, dir.path());
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);
}

ProgramResult eval(const TempDir& dir, const std::vector<std::string>& args) {
  return run_program(program_path("cnn-eval"), args, dir.path());
}

// "  name   12.34%" lines of --predict output, in order.
std::vector<std::pair<std::string, double>> printed_probabilities(const std::string& out) {
  std::vector<std::pair<std::string, double>> rows;
  std::istringstream in(out);
  const std::regex row(R"(^  (\S+) +([0-9.]+)%$)");
  std::smatch m;
  for (std::string line; std::getline(in, line);)
    if (std::regex_match(line, m, row)) rows.emplace_back(m[1].str(), std::stod(m[2].str()));
  return rows;
}

}  // namespace

TEST_CASE("cnn-eval writes the JSON report of the README, consistent with itself and with the trainer's test result", "[cpu]") {
  TempDir dir;
  train_fer_run(dir);
  ProgramResult r = eval(dir, {"run", "--json", "report.json", "--quiet"});
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Matchers::Contains("checkpoint: run/checkpoints/best.safetensors (the run's best"));
  for (const auto& name : fer2013_class_names()) CHECK_THAT(r.out, Catch::Matchers::Contains(name));

  nlohmann::json j = nlohmann::json::parse(read_text_file(dir / "report.json"));
  for (const char* key : {"split", "n", "loss", "top1", "top5", "macro_f1", "per_class", "confusion"})
    CHECK(j.contains(key));
  CHECK(j["split"] == "test");
  CHECK(j["n"] == 64);
  int64_t total = 0, diagonal = 0, support = 0;
  REQUIRE(j["confusion"].size() == 7);
  for (size_t i = 0; i < 7; ++i) {
    REQUIRE(j["confusion"][i].size() == 7);
    for (size_t k = 0; k < 7; ++k) total += j["confusion"][i][k].get<int64_t>();
    diagonal += j["confusion"][i][i].get<int64_t>();
  }
  CHECK(total == 64);
  CHECK(double(diagonal) / 64.0 == Approx(j["top1"].get<double>()));
  REQUIRE(j["per_class"].size() == 7);
  for (size_t i = 0; i < 7; ++i) {
    const auto& c = j["per_class"][i];
    CHECK(c["name"] == fer2013_class_names()[i]);
    for (const char* key : {"precision", "recall", "f1", "support"}) CHECK(c.contains(key));
    support += c["support"].get<int64_t>();
  }
  CHECK(support == 64);
  // One epoch: best = last = the weights the trainer tested, with the normalisation recomputed.
  nlohmann::json test = last_event(read_metrics(dir / "run"), "test");
  REQUIRE(test.is_object());
  CHECK(j["top1"].get<double>() == Approx(test["test_acc"].get<double>()));
  CHECK(j["loss"].get<double>() == Approx(test["test_loss"].get<double>()).epsilon(1e-6));
}

TEST_CASE("cnn-eval --split val evaluates the validation split", "[cpu]") {
  TempDir dir;
  train_fer_run(dir);
  ProgramResult r = eval(dir, {"run", "--split", "val", "--json", "val.json", "--batch", "7", "--quiet"});
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Matchers::Contains("val split: 64 images"));
  nlohmann::json j = nlohmann::json::parse(read_text_file(dir / "val.json"));
  CHECK(j["split"] == "val");
  CHECK(j["n"] == 64);
  // The trainer's last val accuracy (its last epoch) is what the best checkpoint gives.
  nlohmann::json epoch = last_event(read_metrics(dir / "run"), "epoch");
  CHECK(j["top1"].get<double>() == Approx(epoch["val_acc"].get<double>()));
}

TEST_CASE("cnn-eval falls back to the last checkpoint of a run without a best one, and says so", "[cpu]") {
  TempDir dir;
  train_fer_run(dir);
  fs::remove(dir / "run" / "checkpoints" / "best.safetensors");
  ProgramResult r = eval(dir, {"run", "--quiet"});
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Matchers::Contains("checkpoint: run/checkpoints/last.safetensors (the run's last"));
}

TEST_CASE("cnn-eval fails with exit 1 on a missing checkpoint and names the path", "[cpu]") {
  TempDir dir;
  ProgramResult r = eval(dir, {"no/such/run"});
  INFO(r.describe());
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Matchers::Contains("cnn-eval: error:"));
  CHECK_THAT(r.err, Catch::Matchers::Contains("no/such/run"));
}

TEST_CASE("cnn-eval rejects a checkpoint with a flipped data byte and names the corrupt tensor", "[cpu]") {
  TempDir dir;
  train_fer_run(dir);
  std::string bytes = read_text_file(dir / "run" / "checkpoints" / "best.safetensors");
  REQUIRE(bytes.size() > 8);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | uint8_t(bytes[size_t(i)]);
  nlohmann::json header = nlohmann::json::parse(bytes.substr(8, header_len));
  // The tensor whose data sits in the middle of the file.
  std::string victim;
  size_t offset = 0;
  for (auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    size_t begin = info["data_offsets"][0], end = info["data_offsets"][1];
    if (end > begin && (victim.empty() || name == "fc.weight")) victim = name, offset = (begin + end) / 2;
  }
  REQUIRE(!victim.empty());
  bytes[8 + header_len + offset] ^= 0x10;
  write_text_file(dir / "bad.safetensors", bytes);
  ProgramResult r = eval(dir, {"bad.safetensors"});
  INFO(r.describe());
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Matchers::Contains("cnn-eval: error:"));
  CHECK_THAT(r.err, Catch::Matchers::Contains("corrupt"));
  CHECK_THAT(r.err, Catch::Matchers::Contains("'" + victim + "'"));
}

TEST_CASE("cnn-eval --predict prints every class with probabilities summing to 100%", "[cpu]") {
  if (!image_io_available()) CNN_SKIP("this build has no OpenCV: image files can't be read");
  TempDir dir;
  train_fer_run(dir);
  Dataset faces = make_synthetic_faces(2, 7, 1, 60, 60, 77);  // not the model's 48x48: resized
  write_image_file((dir / "a.png").string(), faces.sample(0), 1, 60, 60);
  write_image_file((dir / "b.png").string(), faces.sample(1), 1, 60, 60);
  ProgramResult r = eval(dir, {"run", "--predict", "a.png", "b.png", "--json", "p.json", "--quiet"});
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Matchers::Contains("a.png (whole image)"));
  auto rows = printed_probabilities(r.out);
  REQUIRE(rows.size() == 14);
  for (int image = 0; image < 2; ++image) {
    double sum = 0;
    std::set<std::string> names;
    for (int k = 0; k < 7; ++k) {
      const auto& [name, pct] = rows[size_t(image * 7 + k)];
      sum += pct;
      names.insert(name);
      if (k > 0) CHECK(pct <= rows[size_t(image * 7 + k - 1)].second);  // sorted, most probable first
    }
    CHECK(names.size() == 7);
    CHECK(sum == Approx(100.0).margin(0.05));  // 7 values rounded to 0.01
  }
  nlohmann::json j = nlohmann::json::parse(read_text_file(dir / "p.json"));
  REQUIRE(j["predictions"].size() == 2);
  for (const auto& p : j["predictions"]) {
    double sum = 0;
    for (const auto& c : p["probabilities"]) sum += c["probability"].get<double>();
    CHECK(sum == Approx(1.0).margin(1e-5));
    CHECK(p["top"] == p["probabilities"][0]["name"]);
  }
}

TEST_CASE("cnn-eval --detect-faces says when an image has no face and uses the whole image", "[cpu]") {
  if (!image_io_available()) CNN_SKIP("this build has no OpenCV: no face detection");
  try {
    find_face_cascade();
  } catch (const std::exception& e) {
    CNN_SKIP(std::string("no Haar cascade installed: ") + e.what());
  }
  TempDir dir;
  train_fer_run(dir);
  std::vector<uint8_t> flat(100 * 80, 128);
  write_image_file((dir / "blank.png").string(), flat.data(), 1, 100, 80);
  ProgramResult with = eval(dir, {"run", "--predict", "blank.png", "--detect-faces", "--quiet"});
  ProgramResult without = eval(dir, {"run", "--predict", "blank.png", "--quiet"});
  INFO(with.describe() << without.describe());
  REQUIRE(with.exit_code == 0);
  CHECK_THAT(with.out, Catch::Matchers::Contains("blank.png (no face found: whole image)"));
  CHECK(printed_probabilities(with.out) == printed_probabilities(without.out));
  ProgramResult alone = eval(dir, {"run", "--detect-faces"});
  CHECK(alone.exit_code == 2);  // --detect-faces without --predict is a usage error
}

TEST_CASE("cnn-eval --predict names an image it can't read and fails", "[cpu]") {
  TempDir dir;
  train_fer_run(dir);
  ProgramResult r = eval(dir, {"run", "--predict", "missing.png", "--quiet"});
  INFO(r.describe());
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Matchers::Contains("cnn-eval: error:"));
  CHECK_THAT(r.err, Catch::Matchers::Contains("missing.png"));
}

namespace {

// Every "Training" row of the FER CSV at `path` with all pixels set to `value` (val and test kept).
void overwrite_train_rows(const fs::path& path, int value) {
  std::istringstream in(read_text_file(path));
  std::string out, line, pixels;
  for (int i = 0; i < 48 * 48; ++i) pixels += (i ? " " : "") + std::to_string(value);
  while (std::getline(in, line)) {
    const size_t first = line.find(','), last = line.rfind(',');
    if (first != std::string::npos && line.substr(last + 1) == "Training")
      line = line.substr(0, first + 1) + pixels + line.substr(last);
    out += line + "\n";
  }
  write_text_file(path, out);
}

}  // namespace

TEST_CASE("cnn-eval --predict needs only the checkpoint: the training data may be gone", "[cpu]") {
  if (!image_io_available()) CNN_SKIP("this build has no OpenCV: image files can't be read");
  TempDir dir;
  train_fer_run(dir);  // normalize: auto
  Dataset faces = make_synthetic_faces(2, 7, 1, 48, 48, 5);
  write_image_file((dir / "a.png").string(), faces.sample(0), 1, 48, 48);
  write_image_file((dir / "b.png").string(), faces.sample(1), 1, 48, 48);
  ProgramResult with_data = eval(dir, {"run", "--predict", "a.png", "b.png"});
  INFO(with_data.describe());
  REQUIRE(with_data.exit_code == 0);
  fs::rename(dir / "fer.csv", dir / "elsewhere.csv");  // as on another machine
  ProgramResult without = eval(dir, {"run", "--predict", "a.png", "b.png", "--json", "p.json"});
  INFO(without.describe());
  REQUIRE(without.exit_code == 0);
  CHECK(printed_probabilities(without.out) == printed_probabilities(with_data.out));
  CHECK(printed_probabilities(without.out).size() == 14);
  CHECK_THAT(without.err, Catch::Matchers::Contains("(from the checkpoint)"));
  CHECK(nlohmann::json::parse(read_text_file(dir / "p.json"))["ten_crop"] == false);
  // A split evaluation is what reads data: it names the missing file.
  ProgramResult split = eval(dir, {"run", "--split", "test"});
  CHECK(split.exit_code == 1);
  CHECK_THAT(split.err, Catch::Matchers::Contains("fer.csv"));
}

TEST_CASE("cnn-eval --split normalises with the checkpoint's statistics, not ones recomputed from the data", "[cpu]") {
  TempDir dir;
  train_fer_run(dir);
  // Other training rows: a recomputed `normalize: auto` would shift every test image.
  overwrite_train_rows(dir / "fer.csv", 230);
  ProgramResult r = eval(dir, {"run", "--json", "report.json"});
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Catch::Matchers::Contains("(from the checkpoint)"));
  nlohmann::json j = nlohmann::json::parse(read_text_file(dir / "report.json"));
  nlohmann::json test = last_event(read_metrics(dir / "run"), "test");
  REQUIRE(test.is_object());
  CHECK(j["loss"].get<double>() == Approx(test["test_loss"].get<double>()).epsilon(1e-6));
  CHECK(j["top1"].get<double>() == Approx(test["test_acc"].get<double>()));
}

TEST_CASE("cnn-eval refuses --ten-crop where every crop is the whole image, and reports the crops it used", "[cpu]") {
  TempDir dir;
  train_fer_run(dir);  // 48x48 input, no random crop
  ProgramResult refused = eval(dir, {"run", "--ten-crop"});
  INFO(refused.describe());
  CHECK(refused.exit_code == 2);
  CHECK_THAT(refused.err, Catch::Matchers::Contains("needs a crop smaller than the 48x48 input"));
  CHECK_THAT(refused.err, Catch::Matchers::Contains("no data.augment.random_crop"));

  // tiny.yaml (12x12) trained with 10x10 random crops: ten-crop is meaningful and reported.
  ProgramResult t = run_program(program_path("cnn-train"),
                                {std::string(CNN_SOURCE_DIR) + "/models/tiny.yaml", "--out", "crop", "--device", "cpu",
                                 "--epochs", "1", "--set", "data.synthetic_size=64", "--set",
                                 "data.augment.random_crop.size=10", "--quiet"},
                                dir.path());
  INFO(t.describe());
  REQUIRE(t.exit_code == 0);
  ProgramResult ten = eval(dir, {"crop", "--ten-crop", "--json", "ten.json", "--quiet"});
  INFO(ten.describe());
  REQUIRE(ten.exit_code == 0);
  CHECK_THAT(ten.out, Catch::Matchers::Contains("evaluation: ten-crop: the mean over 10 crops of 10x10 from 12x12"));
  nlohmann::json j = nlohmann::json::parse(read_text_file(dir / "ten.json"));
  CHECK(j["ten_crop"] == true);
  CHECK_THAT(j["crops"].get<std::string>(), Catch::Matchers::Contains("ten-crop"));
  ProgramResult centre = eval(dir, {"crop", "--json", "centre.json", "--quiet"});
  REQUIRE(centre.exit_code == 0);
  CHECK_THAT(centre.out, Catch::Matchers::Contains("evaluation: centre crop 10x10 of 12x12"));
  CHECK(nlohmann::json::parse(read_text_file(dir / "centre.json"))["ten_crop"] == false);
}

// --no-ten-crop: the centre crop alone though the run's config says eval.ten_crop: true (what the
// exported ONNX model computes, which tools/onnx_check.py compares with); not with --ten-crop.
TEST_CASE("cnn-eval --no-ten-crop evaluates the centre crop of a ten-crop run and excludes --ten-crop", "[cpu]") {
  TempDir dir;
  ProgramResult t = run_program(program_path("cnn-train"),
                                {std::string(CNN_SOURCE_DIR) + "/models/tiny.yaml", "--out", "crop", "--device", "cpu",
                                 "--epochs", "1", "--set", "data.synthetic_size=64", "--set",
                                 "data.augment.random_crop.size=10", "--set", "eval.ten_crop=true", "--quiet"},
                                dir.path());
  INFO(t.describe());
  REQUIRE(t.exit_code == 0);
  ProgramResult ten = eval(dir, {"crop", "--json", "ten.json", "--quiet"});
  INFO(ten.describe());
  REQUIRE(ten.exit_code == 0);
  CHECK_THAT(ten.out, Catch::Matchers::Contains("ten-crop: the mean over 10 crops"));
  const nlohmann::json tj = nlohmann::json::parse(read_text_file(dir / "ten.json"));
  CHECK(tj["ten_crop"] == true);
  ProgramResult centre = eval(dir, {"crop", "--no-ten-crop", "--json", "centre.json", "--quiet"});
  INFO(centre.describe());
  REQUIRE(centre.exit_code == 0);
  CHECK_THAT(centre.out, Catch::Matchers::Contains("evaluation: centre crop 10x10 of 12x12"));
  const nlohmann::json cj = nlohmann::json::parse(read_text_file(dir / "centre.json"));
  CHECK(cj["ten_crop"] == false);
  CHECK(cj["loss"].get<double>() != tj["loss"].get<double>());
  ProgramResult both = eval(dir, {"crop", "--ten-crop", "--no-ten-crop"});
  INFO(both.describe());
  CHECK(both.exit_code == 2);
  CHECK_THAT(both.err, Catch::Matchers::Contains("excludes"));
}

TEST_CASE("cnn-eval --face-margin without --detect-faces is a usage error", "[cpu]") {
  TempDir dir;
  train_fer_run(dir);
  std::vector<uint8_t> flat(48 * 48, 128);
  if (image_io_available()) write_image_file((dir / "a.png").string(), flat.data(), 1, 48, 48);
  ProgramResult r = eval(dir, {"run", "--predict", "a.png", "--face-margin", "0.3"});
  INFO(r.describe());
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Matchers::Contains("--face-margin"));
  CHECK_THAT(r.err, Catch::Matchers::Contains("needs --detect-faces"));
}
