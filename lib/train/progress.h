// Training progress: a redrawn one-line bar on a terminal (step, img/s, loss, ETA), plain log
// lines every N steps otherwise (files, CI). The same lines go to the file log (train.log) every N
// steps whatever the console shows (bar, log lines or nothing with --quiet). Trap: finish() must
// end the bar's line before any other output.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace cnn {

class Progress {
public:
  Progress(bool terminal, bool quiet, int64_t log_every);
  // Where the step lines go when the console does not log them (a bar, or quiet).
  void set_file_log(std::function<void(const std::string&)> log) { m_file_log = std::move(log); }
  void start_epoch(int64_t epoch, int64_t epochs, int64_t steps, int64_t first_step = 0);
  void update(int64_t step_in_epoch, int64_t images, double loss, double acc, double lr);
  void finish();
  double epoch_seconds() const;
  double images_per_second() const;

private:
  bool m_terminal, m_quiet;
  int64_t m_log_every;
  int64_t m_epoch = 0, m_epochs = 0, m_steps = 0, m_first = 0, m_images = 0;
  std::chrono::steady_clock::time_point m_start, m_last_draw;
  bool m_drawn = false;
  std::function<void(const std::string&)> m_file_log;
};

bool stderr_is_terminal();

}  // namespace cnn
