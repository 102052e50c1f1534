// `cnn-ckpt export` end to end: every bundled model, trained for two steps, exports to a file that
// Debian's ONNX library (C++ checker and strict shape inference) and python3-onnx (checker with
// full_check) accept, with the metadata a user needs; a build without the ONNX library says so;
// tools/onnx_check.py times our inference (cnn-bench model --inference) beside onnxruntime's.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "checkpoint/checkpoint_state.h"
#include "graph/graph.h"
#include "layers/registry.h"
#include "app/app_util.h"
#include "onnx/onnx_e2e_util.h"
#include "onnx/write.h"
#include "support/catch.h"
#include "support/test_util.h"

using namespace cnn;
using namespace cnn::test::onnx_e2e;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

TEST_CASE("cnn-ckpt export says so and exits 1 in a build without the ONNX library", "[cpu]") {
  if (onnx_export_built()) CNN_SKIP("this build has the ONNX library (CNN_WITH_ONNX=ON)");
  test::TempDir dir("cnn-onnx-off");
  const auto f = export_onnx((dir / "none").string(), (dir / "m.onnx").string());
  INFO(f.describe());
  CHECK(f.exit_code == 1);
  CHECK_THAT(f.err, Contains("cnn-ckpt: error: this build has no ONNX export") && Contains("CNN_WITH_ONNX=OFF"));
  CHECK_FALSE(fs::exists(dir / "m.onnx"));
}

TEST_CASE("every bundled model exports to ONNX that the C++ and Python ONNX checkers accept", "[cpu]") {
  if (!onnx_export_built()) CNN_SKIP(onnx_missing_message());
  test::TempDir dir("cnn-onnx-models");
  const std::vector<std::string> models = test::ckpt::bundled_models();
  REQUIRE(models.size() >= 9);
  for (const std::string& path : models) {
    const std::string name = fs::path(path).stem().string(), run = (dir / name).string();
    INFO(name);
    auto f = train_briefly(name, run);
    INFO(f.describe());
    REQUIRE(f.exit_code == 0);
    const std::string out = (dir / (name + ".onnx")).string();
    f = export_onnx(run, out);
    INFO(f.describe());
    REQUIRE(f.exit_code == 0);
    CHECK_THAT(f.out, Contains("passed the ONNX checker"));

    const OnnxFileSummary s = check_onnx_file(out);
    CHECK(s.opset == 17);
    CHECK(s.producer == "cnn-train");
    CHECK(s.input_dims.front() == 0);  // dynamic batch by default
    CHECK(s.op_types.back() == "Softmax");
    CHECK(std::count(s.op_types.begin(), s.op_types.end(), "BatchNormalization") == 0);  // folded by default
    const ModelSpec spec = validated_checkpoint_spec(read_checkpoint(run).meta.config_yaml, run);
    const auto g = Graph::build(spec);
    CHECK(nlohmann::json::parse(s.metadata.at("classes")).get<std::vector<std::string>>() == g->class_names());
    CHECK(s.output_dims == std::vector<int64_t>{0, g->num_classes()});
    CHECK(s.input_dims == std::vector<int64_t>{0, spec.input.channels, spec.input.height, spec.input.width});
    CHECK(s.metadata.at("config") == read_checkpoint(run).meta.config_yaml);
    CHECK(nlohmann::json::parse(s.metadata.at("normalization")).contains("mean"));

    f = python_onnx_check(out);
    INFO(f.describe());
    if (f.exit_code == 3) CNN_SKIP("python3-onnx is missing: " + f.out);
    CHECK(f.exit_code == 0);
    CHECK_THAT(f.out, Contains("ok 17"));
  }
}

TEST_CASE("export with a fixed batch, an older opset and kept batchnorms passes both checkers", "[cpu]") {
  if (!onnx_export_built()) CNN_SKIP(onnx_missing_message());
  test::TempDir dir("cnn-onnx-flags");
  const std::string run = (dir / "fer").string(), out = (dir / "fer.onnx").string();
  auto f = train_briefly("fer_cnn", run);
  INFO(f.describe());
  REQUIRE(f.exit_code == 0);
  f = export_onnx(run, out, {"--batch", "3", "--opset", "13", "--keep-batchnorm"});
  INFO(f.describe());
  REQUIRE(f.exit_code == 0);
  CHECK_THAT(f.out, Contains("0 batchnorm(s) folded, 7 kept"));
  const OnnxFileSummary s = check_onnx_file(out);
  CHECK(s.opset == 13);
  CHECK(s.input_dims == std::vector<int64_t>{3, 1, 48, 48});
  CHECK(s.output_dims == std::vector<int64_t>{3, 7});
  CHECK(std::count(s.op_types.begin(), s.op_types.end(), "BatchNormalization") == 7);
  f = python_onnx_check(out);
  INFO(f.describe());
  if (f.exit_code == 3) CNN_SKIP("python3-onnx is missing: " + f.out);
  CHECK(f.exit_code == 0);

  for (const std::vector<std::string>& bad : {std::vector<std::string>{"--opset", "12"},
                                              std::vector<std::string>{"--batch", "0"},
                                              std::vector<std::string>{"--fold-batchnorm", "--keep-batchnorm"}}) {
    f = export_onnx(run, (dir / "bad.onnx").string(), bad);
    INFO(f.describe());
    CHECK(f.exit_code == 2);
  }
  CHECK_FALSE(fs::exists(dir / "bad.onnx"));
}

TEST_CASE("the exported model of a ten-crop run says it takes the centre crop", "[cpu]") {
  if (!onnx_export_built()) CNN_SKIP(onnx_missing_message());
  test::TempDir dir("cnn-onnx-tencrop");
  const std::string run = (dir / "vgg").string(), out = (dir / "vgg.onnx").string();
  auto f = train_briefly("vgg_fer", run);  // crop 40 of 48, eval.ten_crop: true
  INFO(f.describe());
  REQUIRE(f.exit_code == 0);
  f = export_onnx(run, out);
  INFO(f.describe());
  REQUIRE(f.exit_code == 0);
  CHECK_THAT(f.out, Contains("note: eval.ten_crop is on") && Contains("centre crop 40x40 of 48x48"));
  const OnnxFileSummary s = check_onnx_file(out);
  CHECK(s.op_types.front() == "Slice");
  CHECK(s.metadata.at("preprocess") == "centre crop 40x40 of 48x48");
}

TEST_CASE("tools/onnx_check.py runs the README's onnxruntime snippet where onnxruntime is installed", "[cpu]") {
  if (!onnx_export_built()) CNN_SKIP(onnx_missing_message());
  test::TempDir dir("cnn-onnx-ort");
  const std::string run = (dir / "fer").string();
  auto f = train_briefly("fer_cnn", run);
  INFO(f.describe());
  REQUIRE(f.exit_code == 0);
  f = export_onnx(run, (dir / "model.onnx").string());
  INFO(f.describe());
  REQUIRE(f.exit_code == 0);
  const int64_t n = 4;
  const std::vector<uint8_t> images = random_images(n, 1, 48, 48, 11);
  const std::vector<float> ours = our_probabilities(run, images, n);
  write_npy((dir / "images.npy").string(), images, {n, 1, 48, 48});
  write_npy((dir / "probs.npy").string(), ours, {n, int64_t(ours.size()) / n});
  const test::ProgramResult r = test::run_program(
      "/usr/bin/python3", {(fs::path(CNN_SOURCE_DIR) / "tools" / "onnx_check.py").string(), "check", dir.path().string(),
                           "--no-bench"});
  INFO(r.describe());
  if (r.exit_code == 3) CNN_SKIP(r.out);  // "onnxruntime or numpy is not installed ..."
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("CPUExecutionProvider: max_abs_diff") && Contains("README snippet: max_abs_diff"));
}

TEST_CASE("tools/onnx_check.py times our inference beside onnxruntime's, also from a slim copy", "[cpu]") {
  if (!onnx_export_built()) CNN_SKIP(onnx_missing_message());
  if (std::system("/usr/bin/python3 -c 'import onnx, numpy' >/dev/null 2>&1") != 0)
    CNN_SKIP("/usr/bin/python3 with python3-onnx and python3-numpy is not installed");
  test::TempDir dir("cnn-onnx-timing");
  const std::string run = (dir / "run").string();
  auto f = train_briefly("tiny", run);
  INFO(f.describe());
  REQUIRE(f.exit_code == 0);
  fs::create_directory(dir / "tiny");
  f = export_onnx(run, (dir / "tiny" / "model.onnx").string());
  INFO(f.describe());
  REQUIRE(f.exit_code == 0);
  const std::string tool = (fs::path(CNN_SOURCE_DIR) / "tools" / "onnx_check.py").string();
  // Every initializer over 100 bytes goes: the slim copy must be regenerated to run.
  test::ProgramResult s = test::run_program(
      "/usr/bin/python3", {tool, "slim", (dir / "tiny").string(), "--out", (dir / "slim").string(), "--limit-mb", "1e-4"});
  INFO(s.describe());
  REQUIRE(s.exit_code == 0);
  CHECK(fs::file_size(dir / "slim" / "model.onnx") < fs::file_size(dir / "tiny" / "model.onnx") / 2);
  // No config.yaml in the folders: check reads the run's config from the model's metadata.
  const test::ProgramResult r = test::run_program(
      "/usr/bin/python3", {tool, "check", (dir / "tiny").string(), (dir / "slim").string(), "--cnn-bench",
                           test::program_path("cnn-bench"), "--ours", "cpu:fp32", "cpu:bf16", "--batches", "2",
                           "--steps", "1", "--repeats", "2", "--warmup", "0", "--threads", "1", "--json",
                           (dir / "t.json").string()});
  INFO(r.describe());
  REQUIRE((r.exit_code == 0 || r.exit_code == 3));  // 3: onnxruntime is not installed, ours still timed
  CHECK_THAT(r.out, Contains("ours cpu") && Contains("host to host"));
  const nlohmann::json j = nlohmann::json::parse(test::read_text_file(dir / "t.json"));
  CHECK(j["threads"] == 1);
  for (const char* folder : {"tiny", "slim"}) {
    INFO(folder);
    const nlohmann::json& timings = j["models"][folder]["timings"];
    std::vector<std::string> ours;
    for (const auto& t : timings) {
      if (t["runtime"] == "onnxruntime CPU") CHECK(t["ms_min"].get<double>() <= t["ms_max"].get<double>());
      if (t["runtime"] != "ours cpu") continue;
      ours.push_back(t["precision"].get<std::string>());
      CHECK(t["batch"] == 2);
      CHECK(t["threads"] == 1);
      CHECK(t["ms_min"].get<double>() <= t["ms"].get<double>());
      CHECK(t["ms"].get<double>() <= t["ms_max"].get<double>());
      CHECK(t["end_to_end"]["img_per_s"].get<double>() > 0);
    }
    CHECK(ours == std::vector<std::string>{"fp32", "bf16"});
    if (r.exit_code == 0) CHECK(timings.size() >= 3);  // onnxruntime's CPU provider too
  }
}
