// The CPU path through the real programs: cnn-bench model takes its threads from OMP_NUM_THREADS
// (else the cores) and reports the count in its text and JSON; a malformed value is refused; and
// tools/compare_pytorch_cpu.py runs end to end as a smoke test (tiny batch, one step, no timing
// asserted) where Debian's python3-torch is installed; and the programs run OpenBLAS's kernels for
// the CPU when the library fell back to its generic ones.
#include <cstdlib>
#include <string>
#include <vector>

#include "app_util.h"
#include "ops/blas_cpu.h"
#include "support/catch.h"
#include "support/test_util.h"

using namespace cnn;
using namespace cnn::test;
using Catch::Matchers::Contains;

namespace {

const std::string kTiny = std::string(CNN_SOURCE_DIR) + "/models/tiny.yaml";

// cnn-bench model tiny.yaml on the cpu, one short repeat, through env(1) with `env` (NAME=VALUE to
// set, or -u NAME to unset).
ProgramResult bench_tiny(const TempDir& dir, std::vector<std::string> env) {
  const std::vector<std::string> bench{program_path("cnn-bench"), "model", kTiny, "--device", "cpu", "--batch", "4",
                                       "--steps", "1", "--repeats", "1", "--warmup", "0", "--json", "m.json"};
  env.insert(env.end(), bench.begin(), bench.end());
  return run_program("/usr/bin/env", env, dir.path());
}

}  // namespace

TEST_CASE("cnn-bench model on the cpu runs OMP_NUM_THREADS threads and reports the count", "[cpu]") {
  TempDir dir("cnn-cpu-threads");
  // 3: not the core count of the 2-core machines this runs on, so the cores cannot pass for it.
  ProgramResult r = bench_tiny(dir, {"OMP_NUM_THREADS=3"});
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("on cpu: 3 threads (OMP_NUM_THREADS)"));
  const nlohmann::json j = nlohmann::json::parse(read_text_file(dir / "m.json"));
  CHECK(j["threads"] == 3);
  CHECK(j["device"] == "cpu: 3 threads (OMP_NUM_THREADS)");

  ProgramResult unset = bench_tiny(dir, {"-u", "OMP_NUM_THREADS"});
  INFO(unset.describe());
  REQUIRE(unset.exit_code == 0);
  CHECK_THAT(unset.out, Contains("threads (cores)"));
}

TEST_CASE("cnn-bench refuses a malformed OMP_NUM_THREADS naming it", "[cpu]") {
  TempDir dir("cnn-cpu-threads-bad");
  ProgramResult r = bench_tiny(dir, {"OMP_NUM_THREADS=two"});
  INFO(r.describe());
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Contains("OMP_NUM_THREADS='two'"));
}

TEST_CASE("compare_pytorch_cpu.py times our step and PyTorch's on the cpu and reports both", "[cpu]") {
  if (std::system("/usr/bin/python3 -c 'import torch, yaml' >/dev/null 2>&1") != 0)
    CNN_SKIP("/usr/bin/python3 with python3-torch and python3-yaml is not installed");
  TempDir dir("cnn-compare-cpu");
  const std::string script = std::string(CNN_SOURCE_DIR) + "/tools/compare_pytorch_cpu.py";
  ProgramResult r = run_program("/usr/bin/python3", {script, kTiny, "--cnn-bench", program_path("cnn-bench"), "--batch",
                                                     "2", "--threads", "1", "--rounds", "2", "--steps", "1",
                                                     "--repeats", "1", "--warmup", "0", "--json", "cmp.json"},
                                dir.path());
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("1 threads each"));
  const nlohmann::json j = nlohmann::json::parse(read_text_file(dir / "cmp.json"));
  CHECK(j["threads"] == 1);
  REQUIRE(j["results"].size() == 1);
  const nlohmann::json& row = j["results"][0];
  CHECK(row["model"] == "tiny");
  CHECK(row["batch"] == 2);
  CHECK(row["ours"]["rounds"].size() == 2);
  CHECK(row["pytorch"]["rounds"].size() == 2);
  CHECK(row["ours"]["median"].get<double>() > 0);
  CHECK(row["pytorch"]["median"].get<double>() > 0);
  CHECK_THAT(row["command"].get<std::string>(), Contains("--device cpu"));

  // Our side failing is reported with its command and exit status.
  ProgramResult bad = run_program("/usr/bin/python3", {script, kTiny, "--cnn-bench", program_path("cnn-bench"),
                                                       "--batch", "2", "--steps", "1", "--repeats", "1", "--rounds",
                                                       "1", "--set", "train.optimizer.type=nope"},
                                  dir.path());
  INFO(bad.describe());
  CHECK(bad.exit_code != 0);
  CHECK_THAT(bad.err, Contains("compare_pytorch_cpu: error"));
}

TEST_CASE("the programs restart with OpenBLAS kernels for the CPU when OpenBLAS fell back to generic ones", "[cpu]") {
  TempDir dir("cnn-cpu-blas");
  if (std::getenv("OPENBLAS_CORETYPE")) CNN_SKIP("OPENBLAS_CORETYPE is set for the tests: this process is not a default one");
  // This test process loaded OpenBLAS without the variable: what OpenBLAS chose here, and what fits.
  const std::string better = blas_better_core(), here = blas_core_name();
  ProgramResult r = bench_tiny(dir, {"-u", "OPENBLAS_CORETYPE"});
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);
  if (better.empty()) {
    CHECK_THAT(r.err, Contains("cpu: OpenBLAS " + here + " kernels\n"));
  } else {
    CHECK_THAT(r.err, Contains("cpu: OpenBLAS " + better + " kernels (OPENBLAS_CORETYPE)"));
  }
  // A user's own choice is left alone, whatever it is.
  ProgramResult mine = bench_tiny(dir, {"OPENBLAS_CORETYPE=Prescott"});
  INFO(mine.describe());
  REQUIRE(mine.exit_code == 0);
  CHECK_THAT(mine.err, Contains("cpu: OpenBLAS Prescott kernels (OPENBLAS_CORETYPE)"));
}
