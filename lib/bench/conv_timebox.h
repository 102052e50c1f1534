// How `cnn-bench conv` spends its time on one point and direction: which candidates it times in
// which order and how many runs each gets. Every candidate first runs once (the screen: its first
// warm-up run, timed); then, fastest screen first, each gets its other warm-up runs and its timed
// runs, unless
//  - cutoff X > 0: its first timed run is more than X times the best median so far here: it stops
//    there, status "abandoned (>Xx best)", that one time kept (runs 1);
//  - the point (all its directions) has run past max_seconds_per_point: one timed run, status
//    "time box" (also when the box runs out between its repeats);
//  - spread S > 0: once 2 or more timed runs are within S of each other ((max - min) / median),
//    no more repeats.
// Trap: the screen is a cold run (first call: plans, workspace growth), so it only orders the
// candidates and lets a hopeless one skip its extra warm-ups; abandonment is decided on a timed run
// made after it. With warmup 0 the screen is still made (one untimed run).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace cnn {

struct TimeBox {
  int warmup = 5, repeats = 20;
  double cutoff = 0;                 // 0: off; else > = 1
  double max_seconds_per_point = 0;  // 0: off
  double spread = 0;                 // 0: off
};

struct CandidateTime {
  std::string status = "ok";  // ok | abandoned (>Xx best) | time box | failed: <why>
  double ms = 0;              // median of the timed runs (0 when failed)
  int runs = 0;               // timed runs behind ms
  double wall_s = 0;          // wall time of all its runs and checks
  bool timed() const { return status == "ok" || status == "time box" || abandoned(); }
  bool abandoned() const { return status.rfind("abandoned", 0) == 0; }
};

// What time_candidates drives: the candidates of one point and direction, and a clock.
class CandidateRunner {
public:
  virtual ~CandidateRunner() = default;
  virtual double run_ms(size_t i) = 0;  // runs candidate i once; its time in ms (throws on failure)
  virtual void before_timing(size_t i) {}  // before i's runs after the screen (e.g. poison outputs)
  // Right after i's last run, before any other candidate runs (e.g. check its output); may throw.
  virtual void after_timing(size_t i, CandidateTime& t) {}
  virtual double now_s() = 0;
};

std::string abandoned_status(double cutoff);  // "abandoned (>4x best)"

// Times candidates 0..n-1 (see the top of this file); point_start_s: now_s() when the point began.
// Failures are rows with status "failed: <what>", never thrown.
std::vector<CandidateTime> time_candidates(size_t n, const TimeBox& box, CandidateRunner& runner,
                                           double point_start_s);

}  // namespace cnn
