// The start-up breakdown of a training run: from the process start (the OS's, core/process_clock.h)
// to the first step that runs at steady speed, phase by phase, and the first epoch's extra cost
// against the median of the later epochs; one table in train.log, one object in the end line.
// Trap: phases are the intervals between consecutive marks, so they sum to the total by
// construction; a part carved out of an interval (the cuDNN handle inside autotuning) is a phase
// of its own, and a phase that does not apply is absent (null and a reason), never a zero. Work
// done on another thread beside the main line (the data read while the device is set up) is a
// phase of its own marked "beside", listed where it began and left out of the sum: the main line
// shows only the time it waited for it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace cnn {

struct StartupPart {
  std::string name;
  double seconds = -1;  // < 0: absent, `note` says why
  std::string note;
};

// One epoch of the segment, on the host clock (no device synchronisation of its own).
struct EpochTiming {
  int64_t epoch = 0;  // 1-based
  int64_t steps = 0;
  double train_s = 0;       // its training steps (batches, steps, progress lines)
  double eval_s = 0;        // val (and test with eval.test_every_epoch) evaluation
  double checkpoint_s = 0;  // checkpoints written after it
  double total_s = 0;       // from its first batch to its metrics line and checkpoints
  double end_s = 0;         // its end, seconds since the process start
  bool full = true;         // false: a resumed segment's first epoch, begun mid-way
};

class StartupBreakdown {
 public:
  // `origin`: how the process start was found (the table's first line says it).
  explicit StartupBreakdown(std::string origin = "process start") : m_origin(std::move(origin)) {}

  // The phase `name` ended at `end_s` (seconds since the process start); it began where the
  // previous one ended (at 0 for the first). `parts` are carved out of it and listed before it,
  // each its own phase; absent parts take no time. A part longer than what is left is cut to it.
  void mark(const std::string& name, double end_s, const std::string& note = "",
            const std::vector<StartupPart>& parts = {});
  void absent(const std::string& name, const std::string& why);
  // Work of `seconds` from `start_s` on another thread, beside the main line's phases: listed
  // after the phases that began before it, not counted in the total (which stays the wall time).
  void beside(const std::string& name, double start_s, double seconds, const std::string& note = "");
  // The last mark ended the start-up: the next step (`step`, 1-based in the segment) runs at
  // steady speed. Warm-up steps are the phases marked with warmup = true.
  void set_steady(int64_t step) { m_steady_step = step; }
  bool steady() const { return m_steady_step > 0; }
  void note_warmup_step(double seconds) { m_warmup_s += seconds, ++m_warmup_steps; }
  // Facts kept in the JSON (module loading, the autotune cache...); string ones also under the table.
  void set_fact(const std::string& key, nlohmann::json value) { m_facts[key] = std::move(value); }
  void add_epoch(const EpochTiming& e) { m_epochs.push_back(e); }

  double total_s() const { return m_end_s; }
  double phases_sum_s() const;  // the main line's phases (not those beside it): the total
  nlohmann::json to_json() const;
  std::string table() const;  // the train.log block

 private:
  struct Phase {
    std::string name;
    double start_s = 0, seconds = -1;  // seconds < 0: absent
    std::string note;
    bool beside = false;  // on another thread, beside the main line: not in the sum
  };
  struct FirstEpoch {
    bool known = false;
    std::string why_not;  // when not known
    EpochTiming first;
    int later = 0;
    double later_total = 0, steady_step = 0, extra = 0;
    std::vector<std::pair<std::string, double>> parts;  // sum to `extra`
  };
  FirstEpoch first_epoch() const;

  std::string m_origin;
  std::vector<Phase> m_phases;
  double m_end_s = 0;
  int64_t m_steady_step = 0;
  double m_warmup_s = 0;
  int m_warmup_steps = 0;
  nlohmann::json m_facts = nlohmann::json::object();
  std::vector<EpochTiming> m_epochs;
};

}  // namespace cnn
