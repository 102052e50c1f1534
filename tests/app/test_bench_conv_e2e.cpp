// `cnn-bench conv --device cpu` end to end on the tiny CPU sweep: the table, the CSV columns
// tools/plot_bench.py reads, the JSON rows, summaries and group means; usage errors exit 2.
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "app/app_util.h"
#include "support/catch.h"
#include "support/test_util.h"

using namespace cnn;
using namespace cnn::test;

namespace {

std::vector<std::string> csv_cells(const std::string& line) {
  std::vector<std::string> f;
  std::istringstream cells(line + ",");
  for (std::string c; std::getline(cells, c, ',');) f.push_back(c);
  return f;
}

// The CSV's data lines.
std::vector<std::string> csv_lines(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> lines;
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

const std::string kTinySweep = std::string(CNN_SOURCE_DIR) + "/bench/sweeps/tiny_cpu.yaml";

}  // namespace

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
  CHECK(header.find(",rel_err,runs,wall_s,copy_of") != std::string::npos);
  int rows = 0, fastest = 0, direct = 0, copies = 0, winograd = 0, winograd_ran = 0;
  while (std::getline(csv, line)) {
    ++rows;
    INFO(line);
    const std::vector<std::string> f = csv_cells(line);
    REQUIRE(f.size() == 24);
    if (!f[23].empty()) ++copies;  // copy_of: T1_stride/stride=1 and T1_fsize/R=S=3 are T1
    if (line.find(",1,ok,") != std::string::npos) ++fastest;
    if (line.find(",cpu:direct,") != std::string::npos) {  // none of the tiny shapes is depthwise
      ++direct;
      CHECK(line.find(",0,cannot implement,") != std::string::npos);
      continue;
    }
    if (line.find(",cpu:winograd,") != std::string::npos) {  // the 3x3 stride-1 points only
      ++winograd;
      if (line.find(",0,cannot implement,") != std::string::npos) continue;
      ++winograd_ran;
    } else {
      CHECK(line.find(",cpu:im2col_gemm,") != std::string::npos);
    }
    // rel_err: the float32 cpu algorithm against the float64 reference.
    const std::string rel = f[20];
    REQUIRE_FALSE(rel.empty());
    CHECK(f[21] == "1");  // timed runs (--repeats 1)
    CHECK(std::stod(rel) >= 0);
    CHECK(std::stod(rel) < 1e-5);
  }
  CHECK(rows == 7 * 3 * 3);  // 7 points x 3 directions x the three cpu implementations
  CHECK(direct == 7 * 3);
  CHECK(winograd == 7 * 3);
  CHECK(winograd_ran == 3 * 3);  // T1, T1_stride/stride=1, T1_fsize/R=S=3
  CHECK(copies == 2 * 3 * 3);
  CHECK(fastest == 7 * 3);  // one fastest of each point and direction
  const nlohmann::json j = nlohmann::json::parse(read_text_file(dir / "out.json"));
  REQUIRE(j["rows"].size() == 63);
  CHECK(j["rows"][0]["layer"] == "T1");
  CHECK(j["rows"][0]["impl"] == "cpu:im2col_gemm");
  CHECK(j["rows"][0]["ms"].get<double>() > 0);
  CHECK(j["rows"][0]["shape"]["K"] == 4);
  CHECK(j["rows"][0]["rel_err"].get<double>() < 1e-5);
  CHECK(j["tolerance"].get<double>() == 1e-4);
  CHECK(j["summaries"].size() == 21);
  // T1 forward: im2col or Winograd, whichever was faster; both within the tolerance.
  const std::set<std::string> t1_rows{"cpu:im2col_gemm", "cpu:winograd"};
  CHECK(t1_rows.count(j["summaries"][0]["best_ours"].get<std::string>()) == 1);
  CHECK(t1_rows.count(j["summaries"][0]["accurate_ours"].get<std::string>()) == 1);
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

TEST_CASE("cnn-bench conv --sweep and --shape time only the named sweeps and base shapes", "[cpu]") {
  TempDir dir;
  ProgramResult r = run_program(program_path("cnn-bench"),
                                {"--quiet", "--autotune-cache", "none", "conv", kTinySweep, "--device", "cpu", "--sweep",
                                 "T1_fsize", "--shape", "T2", "--cutoff", "4", "--spread", "0.5", "--repeats", "3",
                                 "--warmup", "1", "--max-seconds-per-point", "60", "--csv", "out.csv"},
                                dir.path());
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);
  std::set<std::string> points;
  const std::vector<std::string> lines = csv_lines(read_text_file(dir / "out.csv"));
  for (const std::string& line : lines) {
    INFO(line);
    const std::vector<std::string> f = csv_cells(line);
    REQUIRE(f.size() == 24);
    points.insert(f[1]);
    if (f[9] != "ok") continue;
    CHECK(std::stoi(f[21]) >= 2);  // --spread stops after 2 or more timed runs
    CHECK(std::stoi(f[21]) <= 3);
  }
  CHECK(points == std::set<std::string>{"T2", "T1_fsize/R=S=1", "T1_fsize/R=S=3", "T1_fsize/R=S=5"});
  CHECK(lines.size() == 4 * 3 * 3);  // points x directions x cpu implementations
  ProgramResult list = run_program(program_path("cnn-bench"),
                                   {"conv", kTinySweep, "--device", "cpu", "--sweep", "T1_*", "--list"}, dir.path());
  CHECK(list.exit_code == 0);
  CHECK(list.out.find("5 points") != std::string::npos);
  CHECK(list.out.find("T1_stride/stride=2") != std::string::npos);
}

TEST_CASE("cnn-bench conv --max-seconds leaves points for a later --append run, which skips what the CSV has", "[cpu]") {
  TempDir dir;
  const std::vector<std::string> base{"--quiet", "--autotune-cache", "none", "conv",   kTinySweep, "--device",
                                      "cpu",     "--repeats",          "1",    "--csv", "out.csv"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  // A box no point fits in: nothing timed, every point listed as not run.
  ProgramResult r = run_program(program_path("cnn-bench"), with({"--max-seconds", "1e-9"}), dir.path());
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("incomplete: 7 points not run (--max-seconds)") != std::string::npos);
  CHECK(csv_lines(read_text_file(dir / "out.csv")).empty());
  r = run_program(program_path("cnn-bench"), with({"--shape", "T1", "--append"}), dir.path());
  REQUIRE(r.exit_code == 0);
  CHECK(csv_lines(read_text_file(dir / "out.csv")).size() == 3 * 3);
  r = run_program(program_path("cnn-bench"), with({"--append"}), dir.path());
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("3 (point, direction) pairs already in the CSV") != std::string::npos);
  const std::vector<std::string> lines = csv_lines(read_text_file(dir / "out.csv"));
  CHECK(lines.size() == 7 * 3 * 3);
  std::set<std::string> keys;
  for (const std::string& line : lines) {
    const std::vector<std::string> f = csv_cells(line);
    CHECK(keys.insert(f[1] + " " + f[2] + " " + f[3]).second);  // each (point, impl, direction) once
  }
}

TEST_CASE("cnn-bench conv rejects a bad cutoff, an unknown sweep and --append without a matching CSV", "[cpu]") {
  TempDir dir;
  auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> a{"conv", kTinySweep, "--device", "cpu"};
    a.insert(a.end(), extra.begin(), extra.end());
    return run_program(program_path("cnn-bench"), a, dir.path());
  };
  ProgramResult r = run({"--cutoff", "0.5"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--cutoff must be 0 or >= 1") != std::string::npos);
  for (const char* opt : {"--cutoff", "--spread", "--max-seconds", "--max-seconds-per-point"}) {
    r = run({opt, "nan"});  // NaN compares false with every bound: refused, not a silent "no bound"
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("--cutoff must be 0 or >= 1") != std::string::npos);
  }
  r = run({"--sweep", "T1_fsise"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("did you mean 'T1_fsize'") != std::string::npos);
  r = run({"--append"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--append needs --csv FILE") != std::string::npos);
  write_text_file(dir / "other.csv", "layer,impl,direction,ms,tflops\nL1,x,forward,1,1\n");
  r = run({"--append", "--csv", "other.csv"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("expected a CSV written by `cnn-bench conv --csv`") != std::string::npos);
  CHECK(read_text_file(dir / "other.csv").find("L1,x,forward") != std::string::npos);  // left as it was
}
