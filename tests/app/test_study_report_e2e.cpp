// tools/study_report.py (Debian's /usr/bin/python3, python3-matplotlib): on a CSV the test writes
// with known times, errors and statuses (the geometric means, the winners, abandoned and inaccurate
// rows left out of the best, memory- and compute-bound points), on the forward sweeps in
// bench/figures, and on what `cnn-bench conv --device cpu` writes.
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "app/app_util.h"
#include "bench/conv_bench.h"
#include "support/catch.h"
#include "support/test_util.h"

using namespace cnn;
using namespace cnn::test;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

const std::string kScript = std::string(CNN_SOURCE_DIR) + "/tools/study_report.py";
constexpr double kPeak = 65.0;  // TFLOP/s: what peak_share is a share of

struct PointShape {
  int N, C, H, W, K, R, S, pad;
};

// One CSV row as `cnn-bench conv --csv` writes it; tflops and peak_share follow from ms.
std::string row(const std::string& group, const std::string& layer, const std::string& impl, const std::string& dir,
                double ms, const std::string& status, const PointShape& s, double rel_err = 1e-7) {
  const int P = s.H + 2 * s.pad - s.R + 1, Q = s.W + 2 * s.pad - s.S + 1;
  const double flops = 2.0 * s.N * s.K * P * Q * s.C * s.R * s.S;
  const bool timed = ms > 0;
  const double tflops = timed ? flops / (ms * 1e-3) / 1e12 : 0;
  return fmt::format("{},{},{},{},{},{},{},0,0,{},fp32,{},{},{},{},{},{},{},1,{},{},{},0.01,\n", group, layer, impl,
                     dir, timed ? fmt::format("{}", ms) : "", timed ? fmt::format("{}", tflops) : "",
                     timed ? fmt::format("{}", tflops / kPeak) : "", status, s.N, s.C, s.H, s.W, s.K, s.R, s.S, s.pad,
                     timed ? fmt::format("{}", rel_err) : "", timed ? 3 : 0);
}

// ours (cuda:winograd) and cuDNN's best (cudnn:fft) at `ours_ms` and `cudnn_ms`, and rows that
// must not count: an abandoned one and an inaccurate one, both faster, and one that cannot run.
std::string point(const std::string& group, const std::string& layer, const std::string& dir, const PointShape& s,
                  double ours_ms, double cudnn_ms) {
  return row(group, layer, "cuda:winograd", dir, ours_ms, "ok", s) +
         row(group, layer, "cuda:implicit_gemm", dir, 0.001, "abandoned (>4x best)", s) +
         row(group, layer, "cuda:fft", dir, 0, "cannot implement", s) +
         row(group, layer, "cudnn:fft", dir, cudnn_ms, "ok", s) +
         row(group, layer, "cudnn:gemm", dir, 0.001, "ok", s, 1e-2);
}

bool have_matplotlib() { return std::system("/usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1") == 0; }

}  // namespace

TEST_CASE("study_report.py summarises a generated study CSV and draws its sweeps and rooflines", "[cpu]") {
  if (!have_matplotlib()) CNN_SKIP("/usr/bin/python3 with python3-matplotlib is not installed");
  TempDir dir("cnn-study-report");
  const PointShape big{1, 64, 16, 16, 64, 3, 3, 1}, big2{2, 64, 16, 16, 64, 3, 3, 1};
  const PointShape thin{8, 4, 64, 64, 4, 1, 1, 0};  // 1x1, 4 -> 4 channels: about 1 FLOP a byte
  write_text_file(dir / "study.csv",
                  ConvBenchResult::csv_header() + point("base shapes", "L9", "forward", big, 2, 1) +
                      point("L9_batch", "L9_batch/N=1", "forward", big, 1, 2) +
                      point("L9_batch", "L9_batch/N=2", "forward", big2, 4, 2) +
                      point("L9_batch", "L9_batch/N=1", "backward_data", big, 1, 4) +
                      point("L9_batch", "L9_batch/N=2", "backward_data", big2, 1, 1) +
                      point("L9_fsize", "L9_fsize/R=S=1", "forward", thin, 1, 3));
  ProgramResult r = run_program("/usr/bin/python3", {kScript, (dir / "study.csv").string(), "--out",
                                                     (dir / "figs").string()});
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);
  // Ratios cuDNN / ours: batch forward 2 and 0.5, backward data 4 and 1; filter size 3.
  CHECK_THAT(r.out, Contains("### forward\n\n| around | batch | input size | channels | filters | filter size | stride |\n"
                             "|---|---|---|---|---|---|---|\n| L9 | 1.00 | not run | not run | not run | 3.00 | not run |"));
  CHECK_THAT(r.out, Contains("### backward_data\n\n| around | batch | input size | channels | filters | filter size | "
                             "stride |\n|---|---|---|---|---|---|---|\n| L9 | 2.00 | not run |"));
  CHECK_THAT(r.out, Contains("| forward | 0.50 | 0.50 |"));  // the base shape
  CHECK_THAT(r.out, Contains("ridge at 16.6 FLOP/byte"));     // 65 TFLOP/s over 3921 GB/s
  CHECK_THAT(r.out, Contains("| L9_fsize | forward | 1 | Winograd, ours: 1 | 3.00 | R=S=1 |"));
  CHECK_THAT(r.out, Contains("| L9_batch | forward | 2 |"));
  CHECK_THAT(r.out, Contains("| 1.00 | none |"));  // the batch sweep: compute-bound
  CHECK_THAT(r.out, Contains("abandoned by the cutoff 6"));
  for (const char* f : {"sweep_L9_forward_batch.png", "sweep_L9_backward_data_batch.png", "sweep_L9_forward_fsize.png",
                        "roofline_forward.png", "roofline_backward_data.png"})
    CHECK(png_problem(dir / "figs" / f) == "");

  // A lower bandwidth moves the ridge; a stricter tolerance leaves ours (1e-7 > 1e-8) out of the best.
  r = run_program("/usr/bin/python3", {kScript, (dir / "study.csv").string(), "--no-figures", "--bandwidth-gbs", "65",
                                       "--tolerance", "1e-8"});
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("ridge at 1000.0 FLOP/byte"));
  CHECK_THAT(r.out, Contains("| L9 | - | not run |"));

  ProgramResult bad = run_program("/usr/bin/python3", {kScript, (dir / "nothing.csv").string()});
  CHECK(bad.exit_code == 1);
  CHECK_THAT(bad.err, Contains("study_report: error:"));
}

TEST_CASE("study_report.py reads the forward sweeps of bench/figures", "[cpu]") {
  if (!have_matplotlib()) CNN_SKIP("/usr/bin/python3 with python3-matplotlib is not installed");
  TempDir dir("cnn-study-report");
  std::vector<std::string> args{kScript};
  for (int layer = 2; layer <= 5; ++layer)
    args.push_back(fmt::format("{}/bench/figures/sweep_L{}_forward_h200.csv", CNN_SOURCE_DIR, layer));
  args.insert(args.end(), {"--out", dir.path().string()});
  ProgramResult r = run_program("/usr/bin/python3", args);
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);
  for (const char* layer : {"L2", "L3", "L4", "L5"}) CHECK_THAT(r.out, Contains(fmt::format("| {} | ", layer)));
  CHECK_THAT(r.out, Contains("Roofline: measured FP32 peak"));
  CHECK(png_problem(dir / "sweep_L3_forward_fsize.png") == "");
  CHECK(png_problem(dir / "sweep_L5_forward_batch.png") == "");
  CHECK(png_problem(dir / "roofline_forward.png") == "");
}

TEST_CASE("study_report.py takes what cnn-bench conv writes on the cpu", "[cpu]") {
  TempDir dir("cnn-study-report");
  ProgramResult b = run_program(program_path("cnn-bench"),
                                {"--quiet", "--autotune-cache", "none", "conv",
                                 std::string(CNN_SOURCE_DIR) + "/bench/sweeps/tiny_cpu.yaml", "--device", "cpu",
                                 "--repeats", "1", "--warmup", "0", "--cutoff", "4", "--csv", "cpu.csv",
                                 // cpu:im2col_gemm and cpu:direct (not cpu:winograd, which may win the tiny
                                 // 3x3 points on one run and not the next): the winners' family is fixed
                                 "--impl", "cpu:*c*"},
                                dir.path());
  INFO(b.describe());
  REQUIRE(b.exit_code == 0);
  ProgramResult r = run_program("/usr/bin/python3", {kScript, (dir / "cpu.csv").string(), "--no-figures"});
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("no measured peak in the CSVs"));
  CHECK_THAT(r.out, Contains("| T1_fsize | forward | 3 | im2col+GEMM, ours: 3 | - | n/a |"));  // no cuDNN: no ratio
  CHECK_THAT(r.out, Contains("42 rows, 21 points"));
}
