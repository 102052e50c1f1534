// `cnn-bench model --inference` end to end: the text and JSON of a short CPU run, --precision
// reaching it, the options it refuses (usage errors, exit 2), and on a GPU the uncaptured forward
// in fp32 and bf16. No timing is asserted.
#include <string>
#include <vector>

#include "app_util.h"
#include "support/catch.h"
#include "support/test_util.h"

using namespace cnn;
using namespace cnn::test;
using Catch::Matchers::Contains;

namespace {

const std::string kTiny = std::string(CNN_SOURCE_DIR) + "/models/tiny.yaml";

ProgramResult bench_inference(const TempDir& dir, const std::vector<std::string>& extra) {
  std::vector<std::string> args{"model", kTiny, "--inference", "--batch", "3", "--steps",
                                "1",     "--repeats", "2",     "--warmup", "1", "--json", "i.json"};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_program(program_path("cnn-bench"), args, dir.path());
}

}  // namespace

TEST_CASE("cnn-bench model --inference on the cpu prints and writes the inference figures", "[cpu]") {
  TempDir dir("cnn-bench-inference");
  ProgramResult r = bench_inference(dir, {"--device", "cpu", "--precision", "bf16"});
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("tiny on cpu: "));
  CHECK_THAT(r.out, Contains("batch 3, precision bf16, inference: "));
  CHECK_THAT(r.out, Contains("over 2 repeats"));
  CHECK_THAT(r.out, Contains("input: synthetic batch already in the executor's input on the CPU"));
  CHECK_THAT(r.out, Contains("end to end ("));
  const nlohmann::json j = nlohmann::json::parse(read_text_file(dir / "i.json"));
  CHECK(j["mode"] == "inference");
  CHECK(j["batch"] == 3);
  CHECK(j["precision"] == "bf16");
  CHECK(j["threads"].get<int>() >= 1);
  CHECK(j["repeat_img_per_s"].size() == 2);
  CHECK(j["end_to_end"]["repeat_img_per_s"].size() == 2);
  CHECK(j["step_ms_min"].get<double>() <= j["step_ms_max"].get<double>());
}

TEST_CASE("cnn-bench model --inference refuses breakdown and layers with exit 2", "[cpu]") {
  TempDir dir("cnn-bench-inference-usage");
  for (const char* flag : {"--breakdown", "--layers"}) {
    ProgramResult r = bench_inference(dir, {"--device", "cpu", flag});
    INFO(r.describe());
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains(std::string(flag) + " does not go with --inference"));
  }
}

TEST_CASE("cnn-bench model --inference on a gpu runs uncaptured in fp32 and bf16", "[gpu]") {
  CNN_REQUIRE_GPU();
  TempDir dir("cnn-bench-inference-gpu");
  for (const char* precision : {"fp32", "bf16"}) {
    ProgramResult r = bench_inference(dir, {"--device", "cuda", "--precision", precision});
    INFO(r.describe());
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.out, Contains("CUDA graph off (cnn-eval runs its forward passes uncaptured)"));
    CHECK_THAT(r.out, Contains("on the GPU"));
    const nlohmann::json j = nlohmann::json::parse(read_text_file(dir / "i.json"));
    CHECK(j["precision"] == precision);
    CHECK(j["threads"] == 0);
    WARN(r.out);
  }
}
