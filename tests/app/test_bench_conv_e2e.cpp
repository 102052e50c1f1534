// `cnn-bench conv --device cpu` end to end on the tiny CPU sweep: the table, the CSV columns
// tools/plot_bench.py reads, the JSON rows, summaries and group means; usage errors exit 2.
#include <fstream>
#include <sstream>

#include "app/app_util.h"
#include "support/catch.h"
#include "support/test_util.h"

using namespace cnn;
using namespace cnn::test;

TEST_CASE("cnn-bench conv on the cpu writes one csv and json row per point direction and implementation", "[cpu]") {
  TempDir dir;
  const std::string sweep = std::string(CNN_SOURCE_DIR) + "/bench/sweeps/tiny_cpu.yaml";
  ProgramResult r = run_program(program_path("cnn-bench"),
                                {"--quiet", "--autotune-cache", "none", "conv", sweep, "--device", "cpu", "--csv",
                                 "out.csv", "--json", "out.json", "--repeats", "1", "--warmup", "0"},
                                dir.path());
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("measured peak: not measured on the CPU") != std::string::npos);
  CHECK(r.out.find("T1_fsize/R=S=5") != std::string::npos);
  CHECK(r.out.find("geometric mean of the ratio per group") != std::string::npos);
  CHECK(r.out.find("best accurate (rel_err <= 1e-04) of ours vs of cuDNN") != std::string::npos);
  std::istringstream csv(read_text_file(dir / "out.csv"));
  std::string header, line;
  std::getline(csv, header);
  CHECK(header.rfind("group,layer,impl,direction,ms,tflops,peak_share,workspace_bytes,fastest,status,", 0) == 0);
  CHECK(header.substr(header.rfind(',') + 1) == "rel_err");
  int rows = 0, fastest = 0, direct = 0;
  while (std::getline(csv, line)) {
    ++rows;
    INFO(line);
    if (line.find(",cpu:direct,") != std::string::npos) {  // none of the tiny shapes is depthwise
      ++direct;
      CHECK(line.find(",0,cannot implement,") != std::string::npos);
      continue;
    }
    CHECK(line.find(",cpu:im2col_gemm,") != std::string::npos);
    if (line.find(",1,ok,") != std::string::npos) ++fastest;
    // rel_err (last column): the float32 cpu algorithm against the float64 reference.
    const std::string rel = line.substr(line.rfind(',') + 1);
    INFO(line);
    REQUIRE_FALSE(rel.empty());
    CHECK(std::stod(rel) >= 0);
    CHECK(std::stod(rel) < 1e-5);
  }
  CHECK(rows == 7 * 3 * 2);  // 7 points x 3 directions x the two cpu implementations
  CHECK(direct == 7 * 3);
  CHECK(fastest == 7 * 3);    // the only one that runs is the fastest of each
  const nlohmann::json j = nlohmann::json::parse(read_text_file(dir / "out.json"));
  REQUIRE(j["rows"].size() == 42);
  CHECK(j["rows"][0]["layer"] == "T1");
  CHECK(j["rows"][0]["impl"] == "cpu:im2col_gemm");
  CHECK(j["rows"][0]["ms"].get<double>() > 0);
  CHECK(j["rows"][0]["shape"]["K"] == 4);
  CHECK(j["rows"][0]["rel_err"].get<double>() < 1e-5);
  CHECK(j["tolerance"].get<double>() == 1e-4);
  CHECK(j["summaries"].size() == 21);
  CHECK(j["summaries"][0]["best_ours"] == "cpu:im2col_gemm");
  CHECK(j["summaries"][0]["accurate_ours"] == "cpu:im2col_gemm");  // within the tolerance
  CHECK(j["summaries"][0]["accurate_ratio"] == 0);                  // no cuDNN to compare with
  CHECK(j["group_geomean_accurate"].empty());
  CHECK(j["group_geomean"].empty());  // no cuDNN on the CPU: no ratio to average
}

TEST_CASE("cnn-bench conv --autotune-tolerance sets the accuracy limit and rejects a non-positive one", "[cpu]") {
  TempDir dir;
  const std::string sweep = std::string(CNN_SOURCE_DIR) + "/bench/sweeps/tiny_cpu.yaml";
  ProgramResult r = run_program(program_path("cnn-bench"),
                                {"--quiet", "--autotune-cache", "none", "--autotune-tolerance", "1e-9", "conv", sweep,
                                 "--device", "cpu", "--direction", "forward", "--repeats", "1", "--warmup", "0",
                                 "--json", "out.json"},
                                dir.path());
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("best accurate (rel_err <= 1e-09)") != std::string::npos);
  CHECK(r.out.find("(inaccurate)") != std::string::npos);  // float32 is ~1e-7 from float64
  const nlohmann::json j = nlohmann::json::parse(read_text_file(dir / "out.json"));
  CHECK(j["tolerance"].get<double>() == 1e-9);
  CHECK(j["summaries"][0]["accurate_ours"] == "");
  r = run_program(program_path("cnn-bench"), {"--autotune-tolerance", "0", "conv", sweep, "--device", "cpu"},
                  dir.path());
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--autotune-tolerance") != std::string::npos);
}

TEST_CASE("cnn-bench conv with a bad sweep file or nothing to time is a usage error", "[cpu]") {
  TempDir dir;
  write_text_file(dir / "bad.yaml", "version: 1\nshapes:\n  - {name: A, N: 1}\n");
  ProgramResult r = run_program(program_path("cnn-bench"), {"conv", "bad.yaml", "--device", "cpu"}, dir.path());
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("bad.yaml:3") != std::string::npos);
  CHECK(r.err.find("missing required key 'C'") != std::string::npos);
  r = run_program(program_path("cnn-bench"), {"conv", "--device", "cpu"}, dir.path());
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("nothing to time") != std::string::npos);
}
