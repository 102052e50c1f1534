// Progress bar and periodic log lines (see progress.h).
#include "train/progress.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>

namespace cnn {

bool stderr_is_terminal() { return isatty(STDERR_FILENO) == 1; }

Progress::Progress(bool terminal, bool quiet, int64_t log_every)
    : m_terminal(terminal), m_quiet(quiet), m_log_every(log_every > 0 ? log_every : 50) {}

void Progress::start_epoch(int64_t epoch, int64_t epochs, int64_t steps, int64_t first_step) {
  m_epoch = epoch;
  m_epochs = epochs;
  m_steps = steps;
  m_first = first_step;
  m_images = 0;
  m_start = std::chrono::steady_clock::now();
  m_last_draw = m_start - std::chrono::seconds(1);
  m_drawn = false;
}

double Progress::epoch_seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - m_start).count();
}

double Progress::images_per_second() const {
  double s = epoch_seconds();
  return s > 0 ? double(m_images) / s : 0.0;
}

static std::string hms(double s) {
  int64_t t = int64_t(s + 0.5);
  return t >= 3600 ? fmt::format("{}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60) : fmt::format("{}:{:02}", t / 60, t % 60);
}

void Progress::update(int64_t step, int64_t images, double loss, double acc, double lr) {
  m_images += images;
  if (m_quiet && !m_file_log) return;
  int64_t done = step + 1;
  double ips = images_per_second();
  double per_step = epoch_seconds() / double(std::max<int64_t>(1, done - m_first));
  double eta = per_step * double(m_steps - done);
  if (done % m_log_every == 0 || done == m_steps) {
    std::string line = fmt::format("epoch {}/{} step {}/{}: {:.0f} img/s, loss {:.4f}, acc {:.2f}%, lr {:.3g}, ETA {}",
                                   m_epoch + 1, m_epochs, done, m_steps, ips, loss, 100 * acc, lr, hms(eta));
    if (!m_quiet && !m_terminal)
      spdlog::info("{}", line);
    else if (m_file_log)
      m_file_log(line);
  }
  if (m_quiet || !m_terminal) return;
  auto now = std::chrono::steady_clock::now();
  if (done != m_steps && now - m_last_draw < std::chrono::milliseconds(100)) return;
  m_last_draw = now;
  int width = 24;
  int fill = int(double(width) * done / std::max<int64_t>(1, m_steps));
  std::string bar(size_t(fill), '=');
  bar.resize(size_t(width), ' ');
  std::fprintf(stderr, "\repoch %lld/%lld [%s] %lld/%lld  %.0f img/s  loss %.4f  acc %.2f%%  lr %.3g  ETA %s \x1b[K",
               (long long)m_epoch + 1, (long long)m_epochs, bar.c_str(), (long long)done, (long long)m_steps, ips, loss,
               100 * acc, lr, hms(eta).c_str());
  std::fflush(stderr);
  m_drawn = true;
}

void Progress::finish() {
  if (m_drawn) std::fprintf(stderr, "\n");
  m_drawn = false;
}

}  // namespace cnn
