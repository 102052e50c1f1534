// End-to-end tests of what cnn-train's command line refuses before it reads or writes anything:
// out-of-range option values, an unusable --device, an --init-from checkpoint that matches nothing;
// and the wording of errors: no source locations unless --verbose, and a machine without an NVIDIA
// driver is named as such (not "CUDA driver version is insufficient").
#include <regex>

#include "app/app_util.h"
#include "app/ckpt_util.h"
#include "support/catch.h"
#include "support/test_util.h"

using namespace cnn;
using namespace cnn::test;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

// A model whose data does not exist: a refusal that came after the data was read would name it.
struct Fixture {
  TempDir dir{"cnn-cli"};
  Fixture() { write_text_file(dir / "model.yaml", small_model_yaml("fer2013-csv", "missing.csv", 1, 12)); }
  ProgramResult train(std::vector<std::string> args) const {
    args.insert(args.begin(), "model.yaml");
    return run_program(program_path("cnn-train"), args, dir.path());
  }
};

// "(gzip.cpp:18)": a C++ source location at the end of a message.
bool has_source_location(const std::string& text) {
  return std::regex_search(text, std::regex(R"(\([A-Za-z0-9_]+\.(cpp|cu|h|cuh):[0-9]+\))"));
}

}  // namespace

TEST_CASE("cnn-train refuses out-of-range option values with exit 2 before creating anything", "[cpu]") {
  Fixture fx;
  const std::vector<std::vector<std::string>> bad = {
      {"--epochs", "0"},   {"--epochs", "-1"},      {"--batch", "0"},        {"--batch", "-4"},
      {"--max-steps", "-3"}, {"--epochs", "two"},   {"--device", "tpu"},     {"--backend", "opencl"},
      {"--seed", "-1"},    {"--resume", "no-such-run"}, {"--init-from", "no-such.safetensors"}};
  for (const auto& args : bad) {
    std::vector<std::string> a = args;
    a.insert(a.end(), {"--out", "run"});
    ProgramResult r = fx.train(a);
    INFO(r.describe());
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains("cnn-train: error: " + args[0]));
    CHECK_FALSE(fs::exists(fx.dir / "run"));
    CHECK_THAT(r.err, !Contains("missing.csv"));  // refused before the data was looked at
  }
  ProgramResult r = fx.train({"--epochs", "0", "--out", "run"});
  CHECK_THAT(r.err, Contains("expected an integer >= 1, found 0"));
  r = fx.train({"--max-steps", "-3", "--out", "run"});
  CHECK_THAT(r.err, Contains("expected an integer >= 0, found -3"));
  r = run_program(program_path("cnn-train"), {"validate", "model.yaml", "--batch", "0"}, fx.dir.path());
  CHECK(r.exit_code == 2);
  r = run_program(program_path("cnn-train"), {"doctor", "--iters", "0"});
  CHECK(r.exit_code == 2);
}

TEST_CASE("cnn-train refuses --device cuda without a usable GPU before reading data or creating the run directory",
          "[cpu]") {
  if (cuda_available()) CNN_SKIP("this machine has a usable GPU");
  Fixture fx;
  ProgramResult r = fx.train({"--device", "cuda", "--out", "run"});
  INFO(r.describe());
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("--device: cuda requested but " + cuda_device_description()));
  CHECK_THAT(r.err, !Contains("missing.csv"));
  CHECK_THAT(r.err, !Contains("data:"));
  CHECK_FALSE(fs::exists(fx.dir / "run"));
}

TEST_CASE("without an NVIDIA driver doctor and --device auto say so, not that the driver is too old", "[cpu]") {
#ifndef CNN_WITH_CUDA
  CNN_SKIP("this build has no CUDA");
#else
  if (cuda_available()) CNN_SKIP("this machine has a usable GPU");
  if (fs::exists("/proc/driver/nvidia/version")) CNN_SKIP("an NVIDIA driver is installed");
  ProgramResult doc = run_program(program_path("cnn-train"), {"doctor", "--device", "auto"});
  INFO(doc.describe());
  CHECK(doc.exit_code == 0);
  CHECK_THAT(doc.out, Contains("no NVIDIA driver or GPU found"));
  CHECK_THAT(doc.out + doc.err, !Contains("insufficient"));
  TempDir dir("cnn-cli");
  write_text_file(dir / "model.yaml", small_model_yaml("synthetic", "", 1, 12, "eval: {batch_size: 8}\n"));
  ProgramResult r = run_program(program_path("cnn-train"),
                                {"model.yaml", "--device", "auto", "--max-steps", "1", "--out", "run",
                                 "--set", "data.synthetic_size=16"},
                                dir.path());
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.err, Contains("device auto: using the CPU (no NVIDIA driver or GPU found)"));
  CHECK_THAT(r.err, !Contains("insufficient"));
#endif
}

TEST_CASE("error messages end without source locations, which --verbose adds, in every program", "[cpu]") {
  Fixture fx;
  struct Case {
    std::string program;
    std::vector<std::string> args;
  };
  const std::vector<Case> cases = {{"cnn-train", {"model.yaml", "--device", "cpu", "--out", "run"}},
                                   {"cnn-eval", {"no-such-run"}},
                                   {"cnn-ckpt", {"inspect", "no-such.safetensors"}}};
  for (const Case& c : cases) {
    ProgramResult quiet = run_program(program_path(c.program), c.args, fx.dir.path());
    INFO(quiet.describe());
    CHECK(quiet.exit_code == 1);
    CHECK_THAT(quiet.err, Contains(c.program + ": error: "));
    CHECK_FALSE(has_source_location(quiet.err));
    std::vector<std::string> verbose = c.args;
    verbose.push_back("--verbose");
    fs::remove_all(fx.dir / "run");
    ProgramResult loud = run_program(program_path(c.program), verbose, fx.dir.path());
    INFO(loud.describe());
    CHECK(loud.exit_code == 1);
    CHECK(has_source_location(loud.err));
    fs::remove_all(fx.dir / "run");
  }
}

TEST_CASE("an --init-from checkpoint that matches no tensor of the model is refused with exit 2", "[cpu]") {
  TempDir dir("cnn-cli");
  write_text_file(dir / "model.yaml", small_model_yaml("synthetic", "", 1, 12, "eval: {batch_size: 8}\n"));
  ProgramResult base = run_program(program_path("cnn-train"),
                                   {"model.yaml", "--device", "cpu", "--max-steps", "1", "--out", "base", "--quiet",
                                    "--set", "data.synthetic_size=16"},
                                   dir.path());
  INFO(base.describe());
  REQUIRE(base.exit_code == 0);
  // Every layer renamed: the checkpoint's conv1.* and fc.* match nothing.
  ProgramResult r = run_program(program_path("cnn-train"),
                                {"model.yaml", "--device", "cpu", "--max-steps", "1", "--out", "other", "--init-from",
                                 "base", "--set", "layers.conv1.name=c1", "--set", "layers.fc.name=head", "--set",
                                 "data.synthetic_size=16"},
                                dir.path());
  INFO(r.describe());
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("no tensor of 'base/checkpoints/last.safetensors' matches the model"));
  CHECK_THAT(r.err, Contains("conv1.weight [4, 1, 3, 3]"));
  CHECK_THAT(r.err, !Contains("initialised weights from"));
  CHECK_FALSE(fs::exists(dir / "other"));
  // One matching tensor is enough to start (the rest is logged).
  r = run_program(program_path("cnn-train"),
                  {"model.yaml", "--device", "cpu", "--max-steps", "1", "--out", "partial", "--init-from", "base",
                   "--set", "layers.fc.name=head", "--set", "data.synthetic_size=16"},
                  dir.path());
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.err, Contains("initialised weights from 'base/checkpoints/last.safetensors'"));
}
