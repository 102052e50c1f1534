// The start-up breakdown (see startup_breakdown.h).
#include "train/startup_breakdown.h"

#include <fmt/format.h>

#include <algorithm>

namespace cnn {

static double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void StartupBreakdown::mark(const std::string& name, double end_s, const std::string& note,
                            const std::vector<StartupPart>& parts) {
  double at = m_end_s;
  const double end = std::max(end_s, at);  // the steady clock never goes back; rounding might
  for (const StartupPart& p : parts) {
    if (p.seconds < 0) {
      m_phases.push_back({p.name, at, -1, p.note});
      continue;
    }
    const double s = std::min(p.seconds, end - at);
    m_phases.push_back({p.name, at, s, p.note});
    at += s;
  }
  m_phases.push_back({name, at, end - at, note});
  m_end_s = end;
}

void StartupBreakdown::absent(const std::string& name, const std::string& why) {
  m_phases.push_back({name, m_end_s, -1, why});
}

void StartupBreakdown::beside(const std::string& name, double start_s, double seconds, const std::string& note) {
  auto at = std::find_if(m_phases.begin(), m_phases.end(), [&](const Phase& p) { return p.start_s > start_s; });
  m_phases.insert(at, {name, start_s, std::max(seconds, 0.0), note, true});
}

double StartupBreakdown::phases_sum_s() const {
  double s = 0;
  for (const Phase& p : m_phases)
    if (p.seconds >= 0 && !p.beside) s += p.seconds;
  return s;
}

// The first epoch against the median of the later full ones; its extra cost split into the
// warm-up steps, the other steps, evaluation, checkpoints and the rest (which sum to it).
StartupBreakdown::FirstEpoch StartupBreakdown::first_epoch() const {
  FirstEpoch f;
  if (m_epochs.empty()) {
    f.why_not = "no epoch finished";
    return f;
  }
  f.first = m_epochs.front();
  if (!f.first.full) {
    f.why_not = "the segment began mid-epoch (resumed)";
    return f;
  }
  std::vector<double> total, train, eval, ckpt, step;
  for (size_t i = 1; i < m_epochs.size(); ++i) {
    const EpochTiming& e = m_epochs[i];
    if (!e.full || e.steps <= 0) continue;
    total.push_back(e.total_s);
    train.push_back(e.train_s);
    eval.push_back(e.eval_s);
    ckpt.push_back(e.checkpoint_s);
    step.push_back(e.train_s / double(e.steps));
  }
  if (total.empty()) {
    f.why_not = "no later epoch to compare with";
    return f;
  }
  f.known = true;
  f.later = int(total.size());
  f.later_total = median(total);
  f.steady_step = median(step);
  f.extra = f.first.total_s - f.later_total;
  const double warmup = m_warmup_s - double(m_warmup_steps) * f.steady_step;
  const double steps = f.first.train_s - median(train) - warmup;
  const double evaluation = f.first.eval_s - median(eval);
  const double checkpoints = f.first.checkpoint_s - median(ckpt);
  f.parts = {{fmt::format("warm-up steps ({}) beyond the steady step", m_warmup_steps), warmup},
             {"other training steps", steps},
             {"evaluation", evaluation},
             {"checkpoints", checkpoints},
             {"the rest (metrics line, logs)", f.extra - warmup - steps - evaluation - checkpoints}};
  return f;
}

nlohmann::json StartupBreakdown::to_json() const {
  nlohmann::json phases = nlohmann::json::array();
  for (const Phase& p : m_phases) {
    nlohmann::json j{{"name", p.name}, {"start_s", p.start_s}};
    j["seconds"] = p.seconds >= 0 ? nlohmann::json(p.seconds) : nlohmann::json(nullptr);
    if (p.seconds < 0) j["absent"] = p.note;
    else if (!p.note.empty()) j["note"] = p.note;
    if (p.beside) j["beside"] = true;
    phases.push_back(j);
  }
  nlohmann::json out{{"origin", m_origin},
                     {"phases", phases},
                     {"total_s", m_end_s},
                     {"steady_from_step", m_steady_step > 0 ? nlohmann::json(m_steady_step) : nlohmann::json(nullptr)},
                     {"facts", m_facts}};
  const FirstEpoch f = first_epoch();
  if (!f.known) {
    out["first_epoch"] = nullptr;
    out["first_epoch_absent"] = f.why_not;
    return out;
  }
  nlohmann::json parts = nlohmann::json::array();
  for (const auto& [name, s] : f.parts) parts.push_back({{"name", name}, {"seconds", s}});
  out["first_epoch"] = {{"epoch", f.first.epoch},
                        {"seconds", f.first.total_s},
                        {"later_median_s", f.later_total},
                        {"later_epochs", f.later},
                        {"steady_step_s", f.steady_step},
                        {"extra_s", f.extra},
                        {"parts", parts},
                        {"ends_at_s", f.first.end_s},
                        {"start_over_steady_epoch_s", f.first.end_s - f.later_total}};
  return out;
}

std::string StartupBreakdown::table() const {
  size_t width = 32;  // the first epoch's part names are up to 40 wide, under the at and took columns
  for (const Phase& p : m_phases) width = std::max(width, p.name.size() + (p.beside ? 2 : 0));
  std::string s = fmt::format("start-up, seconds since the {}:\n  {:<{}}  {:>7}  {:>7}\n", m_origin, "phase", width,
                              "at", "took");
  for (const Phase& p : m_phases) {
    const std::string took = p.seconds >= 0 ? fmt::format("{:7.3f}", p.seconds) : "absent";
    const std::string note = p.note.empty() ? "" : "  (" + p.note + ")";
    // A phase beside the main line is indented under it, its time outside the total.
    s += fmt::format("{}{:<{}}  {:7.3f}  {:>7}{}\n", p.beside ? "  | " : "  ", p.name, p.beside ? width - 2 : width,
                     p.start_s, took, note);
  }
  s += fmt::format("  {:<{}}  {:7.3f}  {:7.3f}  ({})\n", "total", width, 0.0, m_end_s,
                   m_steady_step > 0 ? fmt::format("step {} is the first at steady speed", m_steady_step)
                                     : std::string("training stopped before a step ran at steady speed"));
  for (const auto& [key, value] : m_facts.items())  // the structured ones are in the JSON only
    if (value.is_string()) s += fmt::format("  {}: {}\n", key, value.get<std::string>());
  const FirstEpoch f = first_epoch();
  if (!f.known) return s + fmt::format("first epoch's extra cost: absent ({})", f.why_not);
  s += fmt::format("first epoch: {:.3f} s against {:.3f} s, the median of {} later epoch{}: {:.3f} s extra\n",
                   f.first.total_s, f.later_total, f.later, f.later == 1 ? "" : "s", f.extra);
  for (const auto& [name, sec] : f.parts) s += fmt::format("  {:<{}}  {:7.3f}\n", name, width + 9, sec);
  s += fmt::format("start to the end of epoch {}: {:.3f} s = a steady epoch ({:.3f} s) + {:.3f} s", f.first.epoch,
                   f.first.end_s, f.later_total, f.first.end_s - f.later_total);
  return s;
}

}  // namespace cnn
