// Hooks of the end-to-end tests that make a stop, or a rank's death, happen at a chosen step. They
// travel in TrainOptions::test_hooks; the library never reads the environment for them: cnn-train
// fills them from the CNN_TEST_* variables at its edge (parse_test_hooks with std::getenv). Not
// for users. Trap: steps count from 1 (step k is the k-th optimizer step of the run, resumes included).
#pragma once

#include <csignal>
#include <cstdint>
#include <functional>

namespace cnn {

struct TestHooks {
  // CNN_TEST_STOP_AT_STEP=k: raise stop_signal right after step k, through the installed handler,
  // so a "stopped by a signal mid-epoch" run is reproducible to the step (0: never).
  // CNN_TEST_STOP_SIGNAL: TERM (default), INT, 15 or 2. CNN_TEST_STOP_RANK=r: in a data-parallel
  // run only rank r raises it (-1: every rank).
  int64_t stop_at_step = 0;
  int stop_signal = SIGTERM;
  int stop_rank = -1;
  // CNN_TEST_KILL_RANK=r CNN_TEST_KILL_AT_STEP=k (data-parallel runs): rank r dies (_exit(9)) 0.3 s
  // into the forward pass of step k, or hangs there for good with CNN_TEST_KILL_MODE=stall (its
  // watchdog thread keeps reporting).
  int64_t kill_at_step = 0;
  int kill_rank = -1;
  bool kill_stall = false;

  // Whether the stop signal is raised right after step `step` on data-parallel rank `rank` (-1: the
  // plain loop, which ignores stop_rank).
  bool stops_after(int64_t step, int rank = -1) const {
    return stop_at_step != 0 && step == stop_at_step && (rank < 0 || stop_rank < 0 || stop_rank == rank);
  }
  bool kills_at(int64_t step, int rank) const { return kill_at_step != 0 && step == kill_at_step && rank == kill_rank; }
};

// From the CNN_TEST_* variables as `lookup` returns them (null or empty: not set). A stop step
// that is no number, or a signal other than TERM/INT/15/2, is a cnn::Error naming the variable.
TestHooks parse_test_hooks(const std::function<const char*(const char*)>& lookup);

}  // namespace cnn
