// Exceptions out of OpenMP loops: one escaping an OpenMP region calls std::terminate (abort, exit
// 134), so each iteration runs inside ParallelErrors::run, and rethrow() after the loop throws the
// exception of the lowest failing iteration. Trap: OpenMP loops can't break; iterations after a
// failure are skipped (cheap), those before it all run, so which error is reported is deterministic.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <limits>
#include <mutex>

namespace cnn {

class ParallelErrors {
public:
  // Runs body() unless an earlier iteration (a lower i) already failed; never throws.
  template <typename F>
  void run(int64_t i, F&& body) noexcept {
    if (i > m_first.load(std::memory_order_relaxed)) return;
    try {
      body();
    } catch (...) {
      std::lock_guard<std::mutex> lk(m_mutex);
      if (i < m_first.load(std::memory_order_relaxed)) {
        m_first.store(i, std::memory_order_relaxed);
        m_error = std::current_exception();
      }
    }
  }
  // Throws the exception of the lowest failing iteration, if any; call after the parallel region.
  void rethrow() const {
    if (m_error) std::rethrow_exception(m_error);
  }

private:
  std::mutex m_mutex;
  std::atomic<int64_t> m_first{std::numeric_limits<int64_t>::max()};
  std::exception_ptr m_error;
};

}  // namespace cnn
