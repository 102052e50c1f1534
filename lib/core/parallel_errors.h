// Exceptions and OpenMP: an exception that leaves an OpenMP structured block (a parallel region or
// one iteration of a worksharing loop) calls std::terminate, and the process aborts without a word.
// A region whose body can throw (an allocation, a CNN_CHECK in a callee) runs the body through
// ParallelErrors::run and calls rethrow() after the region: the first exception is rethrown on the
// calling thread, and bodies that start after a failure are skipped.
// Trap: rethrow() belongs after the region, never inside it. A region with a barrier must still
// reach the barrier in every thread: wrap the parts between barriers, not the barrier itself.
// Regions whose bodies only do arithmetic on memory allocated before them cannot throw and are
// left as they are (SIMD loops would lose vectorisation to a try block).
#pragma once

#include <atomic>
#include <exception>

namespace cnn {

class ParallelErrors {
public:
  // Runs body() unless an earlier body failed; an exception it throws is kept, not propagated.
  template <typename F>
  void run(F&& body) noexcept {
    if (m_failed.load(std::memory_order_relaxed)) return;
    try {
      body();
    } catch (...) {
      // The first failing thread owns m_first; the region's end orders its write before rethrow().
      if (!m_failed.exchange(true)) m_first = std::current_exception();
    }
  }
  bool failed() const { return m_failed.load(); }
  // Rethrows the first exception a body threw, if any. Call after the parallel region.
  void rethrow() {
    if (!m_failed.load()) return;
    std::exception_ptr e = m_first;
    m_first = nullptr;
    m_failed = false;
    std::rethrow_exception(e);
  }

private:
  std::atomic<bool> m_failed{false};
  std::exception_ptr m_first;
};

}  // namespace cnn
