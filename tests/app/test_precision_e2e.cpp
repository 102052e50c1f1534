// End-to-end tests of train.precision (--precision) through the real programs on the CPU: the
// value reaches config.yaml, the checkpoint, cnn-ckpt inspect, cnn-eval (the checkpoint's by
// default, --precision overrides), resume (kept, or changed and logged) and both benchmark JSONs;
// bf16 is refused naming the implemented values; the CPU, which has no TF32, says once that it
// runs FP32. What TF32 computes on a GPU is tested in tests/ops and tests/train ([gpu]).
#include <filesystem>
#include <string>
#include <vector>

#include "app_util.h"
#include "support/catch.h"
#include "support/test_util.h"

using namespace cnn;
using namespace cnn::test;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

const std::string kTiny = std::string(CNN_SOURCE_DIR) + "/models/tiny.yaml";

// models/tiny.yaml for `epochs` epochs on 64 synthetic images into dir/run, with `extra` options.
ProgramResult train_tiny(const TempDir& dir, std::vector<std::string> extra, int epochs = 1) {
  std::vector<std::string> args{kTiny,       "--out", "run", "--device", "cpu", "--epochs", std::to_string(epochs),
                                "--set",     "data.synthetic_size=64"};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_program(program_path("cnn-train"), args, dir.path());
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("cnn-train --precision tf32 on the CPU records it and says once that the CPU runs FP32", "[cpu]") {
  TempDir dir("cnn-precision");
  ProgramResult r = train_tiny(dir, {"--precision", "tf32"});
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(read_text_file(dir / "run" / "config.yaml"), Contains("precision: tf32"));
  const std::string line = "precision: tf32 asked, but the CPU has no TF32: every op runs in FP32";
  CHECK(count_of(r.err, line) == 1);
  CHECK_THAT(r.err, !Contains("warning"));
  CHECK(count_of(read_text_file(dir / "run" / "train.log"), line) == 1);

  // The default run says fp32, and its config records it.
  TempDir plain("cnn-precision-fp32");
  ProgramResult p = train_tiny(plain, {"--quiet"});
  REQUIRE(p.exit_code == 0);
  CHECK_THAT(read_text_file(plain / "run" / "config.yaml"), Contains("precision: fp32"));
}

TEST_CASE("an unknown precision is refused with exit 2 naming the implemented ones", "[cpu]") {
  TempDir dir("cnn-precision-bad");
  for (const std::string bad : {"fp8", "bf8"}) {
    ProgramResult r = train_tiny(dir, {"--precision", bad});
    INFO(r.describe());
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains("'train.precision': expected one of fp32, tf32, bf16, fp16, found '" + bad + "'"));
    CHECK_FALSE(fs::exists(dir / "run"));
    ProgramResult b = run_program(program_path("cnn-bench"), {"model", kTiny, "--device", "cpu", "--precision", bad});
    CHECK(b.exit_code == 2);
    CHECK_THAT(b.err, Contains("expected one of fp32, tf32"));
  }
}

TEST_CASE("the checkpoint keeps the precision: inspect shows it, cnn-eval and resume default to it", "[cpu]") {
  TempDir dir("cnn-precision-ckpt");
  ProgramResult t = train_tiny(dir, {"--precision", "tf32", "--quiet"});
  INFO(t.describe());
  REQUIRE(t.exit_code == 0);

  ProgramResult i = run_program(program_path("cnn-ckpt"), {"inspect", "run"}, dir.path());
  INFO(i.describe());
  CHECK(i.exit_code == 0);
  CHECK_THAT(i.out, Contains("precision:     tf32"));
  ProgramResult ij = run_program(program_path("cnn-ckpt"), {"inspect", "run", "--json"}, dir.path());
  CHECK(nlohmann::json::parse(ij.out)["summary"]["precision"] == "tf32");

  ProgramResult e = run_program(program_path("cnn-eval"), {"run", "--device", "cpu"}, dir.path());
  INFO(e.describe());
  CHECK(e.exit_code == 0);
  CHECK_THAT(e.out, Contains("precision: tf32 (the checkpoint's)"));
  CHECK_THAT(e.err, Contains("precision: tf32 asked, but the CPU has no TF32"));
  ProgramResult o = run_program(program_path("cnn-eval"), {"run", "--device", "cpu", "--precision", "fp32"}, dir.path());
  CHECK(o.exit_code == 0);
  CHECK_THAT(o.out, Contains("precision: fp32 (--precision)"));
  CHECK_THAT(o.err, Contains("precision: fp32 (plain FP32 math"));
  ProgramResult h = run_program(program_path("cnn-eval"), {"run", "--device", "cpu", "--precision", "fp16"}, dir.path());
  CHECK(h.exit_code == 0);
  CHECK_THAT(h.out, Contains("precision: fp16 (--precision)"));
  CHECK_THAT(h.err, Contains("precision: fp16: "));

  // --resume RUN_DIR keeps tf32; a different --precision is allowed (it changes only math) and logged.
  ProgramResult kept = run_program(program_path("cnn-train"), {"--resume", "run", "--epochs", "2", "--device", "cpu"}, dir.path());
  INFO(kept.describe());
  REQUIRE(kept.exit_code == 0);
  CHECK_THAT(kept.err, !Contains("overriding train.precision"));
  CHECK_THAT(read_text_file(dir / "run" / "config.yaml"), Contains("precision: tf32"));
  ProgramResult changed = run_program(program_path("cnn-train"),
                                      {"--resume", "run", "--epochs", "3", "--device", "cpu", "--precision", "fp32"}, dir.path());
  INFO(changed.describe());
  REQUIRE(changed.exit_code == 0);
  CHECK_THAT(changed.err, Contains("resume: overriding train.precision: tf32 -> fp32"));
  CHECK_THAT(changed.err, Contains("the precision changes only how activations are stored and products taken"));
  CHECK_THAT(read_text_file(dir / "run" / "config.yaml"), Contains("precision: fp32"));
}

TEST_CASE("an fp16 run whose scaled gradients overflow skips those steps, halves the scale and trains on", "[cpu]") {
  TempDir dir("cnn-precision-fp16");
  // 2^24 overflows f16 (65504) in the first backward; each skip halves it until it fits.
  ProgramResult r = train_tiny(dir, {"--precision", "fp16", "--set", "train.loss_scale.init=16777216"}, 4);
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Contains("step 1: the fp16 gradients overflowed (inf or NaN): step skipped, loss scale halved to "
                             "8388608 (1 skipped so far)"));
  CHECK_THAT(r.err, Contains("step 2: the fp16 gradients overflowed"));
  const std::vector<nlohmann::json> lines = read_metrics(dir / "run");
  const nlohmann::json end = last_event(lines, "end"), epoch = last_event(lines, "epoch");
  const int64_t skipped = end["skipped_steps"].get<int64_t>(), steps = end["step"].get<int64_t>();
  const double scale = end["loss_scale"].get<double>();
  CHECK(epoch["skipped_steps"] == end["skipped_steps"]);
  CHECK(skipped >= 2);
  CHECK(skipped < steps);  // it recovered: later steps trained
  CHECK(scale < 16777216.0 / 2);
  CHECK(count_of(r.err, "gradients overflowed") == size_t(skipped));
  CHECK_THAT(read_text_file(dir / "run" / "config.yaml"), Contains("precision: fp16"));
  ProgramResult i = run_program(program_path("cnn-ckpt"), {"inspect", "run"}, dir.path());
  INFO(i.describe());
  CHECK(i.exit_code == 0);
  CHECK_THAT(i.out, Contains("loss scale:"));
  CHECK_THAT(i.out, Contains("\"skipped_steps\":\"" + std::to_string(skipped) + "\""));
  // The weights are finite and the run evaluates.
  ProgramResult e = run_program(program_path("cnn-eval"), {"run", "--device", "cpu"}, dir.path());
  INFO(e.describe());
  CHECK(e.exit_code == 0);
}

TEST_CASE("train.loss_scale is checked: a power of two from 1 to 2^24, a growth interval of at least 1", "[cpu]") {
  TempDir dir("cnn-precision-scale");
  for (const std::string bad : {"train.loss_scale.init=1000", "train.loss_scale.init=0.5",
                                "train.loss_scale.init=33554432", "train.loss_scale.growth_interval=0",
                                "train.loss_scale.grow=2"}) {
    ProgramResult r = train_tiny(dir, {"--precision", "fp16", "--set", bad});
    INFO(bad << "\n" << r.describe());
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains("train.loss_scale"));
  }
}

TEST_CASE("cnn-bench model and cnn-bench conv write the precision into their JSON", "[cpu]") {
  TempDir dir("cnn-precision-bench");
  for (const std::string p : {"", "tf32", "fp16"}) {
    std::vector<std::string> args{"model", kTiny, "--device", "cpu", "--batch", "4", "--steps", "1",
                                  "--repeats", "1", "--warmup", "0", "--json", "m.json"};
    if (!p.empty()) args.insert(args.end(), {"--precision", p});
    ProgramResult r = run_program(program_path("cnn-bench"), args, dir.path());
    INFO(r.describe());
    REQUIRE(r.exit_code == 0);
    const std::string want = p.empty() ? "fp32" : p;
    CHECK(nlohmann::json::parse(read_text_file(dir / "m.json"))["precision"] == want);
    CHECK_THAT(r.out, Contains("precision " + want + ":"));
  }
  ProgramResult c = run_program(program_path("cnn-bench"),
                                {"conv", std::string(CNN_SOURCE_DIR) + "/bench/sweeps/tiny_cpu.yaml", "--device", "cpu",
                                 "--precision", "tf32", "--repeats", "1", "--warmup", "0", "--json", "c.json", "--csv",
                                 "c.csv"},
                                dir.path());
  INFO(c.describe());
  REQUIRE(c.exit_code == 0);
  const nlohmann::json j = nlohmann::json::parse(read_text_file(dir / "c.json"));
  CHECK(j["precision"] == "tf32");
  REQUIRE_FALSE(j["rows"].empty());
  for (const auto& row : j["rows"]) {
    CHECK(row["precision"] == "fp32");  // the CPU rows have no TF32
    CHECK(row["tolerance"] == 1e-4);
  }
  const std::string csv = read_text_file(dir / "c.csv");
  CHECK(csv.rfind("group,layer,impl,direction,ms,tflops,peak_share,workspace_bytes,fastest,status,precision,N,", 0) == 0);
  CHECK_THAT(csv, Contains(",ok,fp32,"));
  ProgramResult bad = run_program(program_path("cnn-bench"),
                                  {"conv", std::string(CNN_SOURCE_DIR) + "/bench/sweeps/tiny_cpu.yaml", "--precision",
                                   "bf16"},
                                  dir.path());
  CHECK(bad.exit_code == 2);
}
