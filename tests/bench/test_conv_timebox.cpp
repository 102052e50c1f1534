// The time box of `cnn-bench conv` on fake candidates with fixed run times and a fake clock that
// advances by each run: the order of timing, abandonment after one timed run, the per-point box,
// the spread rule, failures as rows, and the checks run right after each candidate's last run.
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/conv_bench.h"
#include "bench/conv_timebox.h"
#include "support/catch.h"

using namespace cnn;

namespace {

// Candidate i takes ms[i] a run (its first run, the screen, first_ms[i] when given); the clock
// advances by each run's time.
class FakeRunner final : public CandidateRunner {
public:
  explicit FakeRunner(std::vector<double> ms) : m_ms(std::move(ms)), runs(m_ms.size(), 0), first_ms(m_ms.size(), 0) {}
  double run_ms(size_t i) override {
    if (fail_at == int(i)) throw std::runtime_error("out of memory");
    const double t = runs[i] == 0 && first_ms[i] > 0 ? first_ms[i] : m_ms[i];
    ++runs[i];
    log.push_back(int(i));
    m_clock_s += t / 1000;
    return t;
  }
  void before_timing(size_t i) override { prepared.push_back(int(i)); }
  void after_timing(size_t i, CandidateTime& t) override {
    checked.push_back(int(i));
    CHECK(log.back() == int(i));  // nothing ran between its last run and its check
  }
  double now_s() override { return m_clock_s; }

private:
  std::vector<double> m_ms;
  double m_clock_s = 100;

public:
  std::vector<int> runs;
  std::vector<double> first_ms;
  std::vector<int> log, prepared, checked;
  int fail_at = -1;
};

}  // namespace

TEST_CASE("time box off: every candidate gets its warm-up and timed runs, fastest screen first", "[cpu]") {
  FakeRunner r({5.0, 1.0, 300.0});
  TimeBox box;
  box.warmup = 2, box.repeats = 3;
  const std::vector<CandidateTime> t = time_candidates(3, box, r, 100);
  for (size_t i = 0; i < 3; ++i) {
    INFO(i);
    CHECK(t[i].status == "ok");
    CHECK(t[i].runs == 3);
    CHECK(r.runs[i] == 2 + 3);  // the screen is the first warm-up run
  }
  CHECK(t[2].ms == 300.0);
  CHECK(r.prepared == std::vector<int>{1, 0, 2});  // after the screens, fastest first
  CHECK(r.checked == std::vector<int>{1, 0, 2});
}

TEST_CASE("a candidate slower than cutoff times the best is abandoned after one timed run", "[cpu]") {
  FakeRunner r({1.0, 3.9, 4.1, 98.0});
  TimeBox box;
  box.warmup = 3, box.repeats = 5, box.cutoff = 4;
  const std::vector<CandidateTime> t = time_candidates(4, box, r, 100);
  CHECK(t[0].status == "ok");
  CHECK(t[0].runs == 5);
  CHECK(r.runs[0] == 3 + 5);
  CHECK(t[1].status == "ok");  // 3.9 <= 4 x 1.0
  CHECK(t[1].runs == 5);
  for (size_t i : {2, 3}) {
    INFO(i);
    CHECK(t[i].status == "abandoned (>4x best)");
    CHECK(t[i].abandoned());
    CHECK(t[i].timed());
    CHECK(t[i].runs == 1);
    CHECK(r.runs[i] == 2);  // the screen, then one timed run: no extra warm-ups, no repeats
  }
  CHECK(t[3].ms == 98.0);
  CHECK(r.checked.size() == 4);  // abandoned ones are checked too (their one run)
}

TEST_CASE("a cold first run over the cutoff does not abandon a candidate whose timed run is within it", "[cpu]") {
  FakeRunner r({1.0, 2.0});
  r.first_ms[1] = 50.0;  // e.g. a plan made on the first call
  TimeBox box;
  box.warmup = 1, box.repeats = 3, box.cutoff = 4;
  const std::vector<CandidateTime> t = time_candidates(2, box, r, 100);
  CHECK(t[1].status == "ok");
  CHECK(t[1].ms == 2.0);
  CHECK(t[1].runs == 3);
}

TEST_CASE("the best so far is the smallest median, so the order of the registry does not matter", "[cpu]") {
  // The slow one is listed first; the screens put the fast one first, so the slow one is abandoned.
  FakeRunner r({40.0, 2.0});
  TimeBox box;
  box.warmup = 1, box.repeats = 4, box.cutoff = 8;
  const std::vector<CandidateTime> t = time_candidates(2, box, r, 100);
  CHECK(t[0].abandoned());
  CHECK(t[1].status == "ok");
  CHECK(r.runs[0] == 2);
}

TEST_CASE("past the point's time box the remaining candidates get one timed run", "[cpu]") {
  FakeRunner r({1000.0, 1500.0, 2000.0});  // seconds of fake clock: 1, 1.5 and 2 s a run
  TimeBox box;
  box.warmup = 1, box.repeats = 3, box.max_seconds_per_point = 8;
  // Screens 4.5 s; candidate 0: 3 runs, 7.5 s; candidate 1: one run, 9 s, then the box is past.
  const std::vector<CandidateTime> t = time_candidates(3, box, r, 100);
  CHECK(t[0].status == "ok");
  CHECK(t[0].runs == 3);
  CHECK(t[1].status == "time box");
  CHECK(t[1].runs == 1);
  CHECK(t[2].status == "time box");
  CHECK(t[2].runs == 1);
  CHECK(r.runs[2] == 2);
  CHECK(t[2].timed());
}

TEST_CASE("with a spread limit the repeats stop once the timed runs agree", "[cpu]") {
  FakeRunner r({1.0});
  TimeBox box;
  box.warmup = 1, box.repeats = 10, box.spread = 0.05;
  const std::vector<CandidateTime> t = time_candidates(1, box, r, 100);
  CHECK(t[0].status == "ok");
  CHECK(t[0].runs == 2);
  CHECK(r.runs[0] == 3);
}

TEST_CASE("a candidate that throws is a failed row and the others are still timed", "[cpu]") {
  FakeRunner r({1.0, 2.0});
  r.fail_at = 0;
  TimeBox box;
  box.warmup = 1, box.repeats = 2, box.cutoff = 4;
  const std::vector<CandidateTime> t = time_candidates(2, box, r, 100);
  CHECK(t[0].status == "failed: out of memory");
  CHECK_FALSE(t[0].timed());
  CHECK(t[1].status == "ok");
  CHECK(t[1].runs == 2);
}

TEST_CASE("bench_conv with a cutoff keeps each row's time, timed runs and error, abandoned or not", "[cpu]") {
  // Depthwise: both cpu:direct and cpu:im2col_gemm run it (cpu:winograd cannot: a row that says so). Which one is slower on a loaded
  // machine is not fixed, so this checks the rows of either outcome; the fake runner above fixes it.
  ConvPoint p;
  p.group = "g", p.name = "dw";
  p.shape = Conv2dShape::make(1, 64, 8, 8, 64, 3, 3, 1, 1, 1, 1, 1, 1, 64);
  p.directions = {ConvDir::forward, ConvDir::backward_data, ConvDir::backward_filter};
  ConvBenchOptions opt;
  opt.device = "cpu", opt.warmup = 1, opt.repeats = 3, opt.cutoff = 1;
  std::vector<size_t> streamed;
  opt.on_rows = [&](const ConvBenchResult& r, size_t first) { streamed.push_back(r.rows.size() - first); };
  const ConvBenchResult r = bench_conv({p, p}, opt);  // the second copies the first
  REQUIRE(r.rows.size() == 18);
  CHECK(streamed == std::vector<size_t>{9, 9});
  CHECK(r.points_timed == 1);
  CHECK(r.points_copied == 1);
  for (size_t d = 0; d < 3; ++d) {
    const ConvBenchRow& a = r.rows[3 * d];
    const ConvBenchRow& b = r.rows[3 * d + 1];
    CHECK(r.rows[3 * d + 2].impl == "cpu:winograd");
    CHECK(r.rows[3 * d + 2].status == "cannot implement");
    CHECK_FALSE(r.rows[3 * d + 2].fastest);
    INFO(a.direction << ": " << a.impl << " " << a.status << " " << a.ms << " ms; " << b.impl << " " << b.status
                     << " " << b.ms << " ms");
    REQUIRE(a.fastest != b.fastest);
    const ConvBenchRow& fast = a.fastest ? a : b;
    const ConvBenchRow& other = a.fastest ? b : a;
    CHECK(fast.status == "ok");
    CHECK(fast.runs == 3);
    if (other.status == "ok") {
      CHECK(other.runs == 3);
    } else {
      CHECK(other.status == "abandoned (>1x best)");
      CHECK(other.runs == 1);
      CHECK(other.ms > fast.ms);
    }
    for (const ConvBenchRow* row : {&a, &b}) {
      CHECK(row->tflops > 0);
      CHECK(row->rel_err >= 0);  // checked against the float64 reference
      CHECK(row->rel_err < 1e-5);
      CHECK(row->wall_s > 0);
      CHECK(row->copy_of.empty());
    }
    const ConvBenchRow& copy = r.rows[9 + 3 * d];
    CHECK(copy.copy_of == "dw");
    CHECK(copy.ms == a.ms);
    CHECK(copy.status == a.status);
    CHECK(copy.wall_s == 0);
  }
}
