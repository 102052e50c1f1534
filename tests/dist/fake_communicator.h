// A communicator for unit tests that plays rank `rank` of a world of `size` without any peer
// process: the other ranks' contributions to a sum come from peer_values (a function of the peer
// rank and the element's position in the flat buffer it was given), every collective is logged,
// allgather answers with preset values, and heartbeats go to a queue the test fills.
// Trap: sums add the peers in rank order after this rank's value, so an exact expectation must
// add in that same order.
#pragma once

#include <deque>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "dist/communicator.h"

namespace cnn::test {

class FakeCommunicator : public Communicator {
 public:
  FakeCommunicator(int rank, int size) : m_rank(rank), m_size(size) {}
  std::string kind() const override { return "fake"; }
  int rank() const override { return m_rank; }
  int size() const override { return m_size; }
  int local_rank() const override { return m_rank; }
  int local_size() const override { return m_size; }
  std::string host() const override { return "host" + std::to_string(m_rank); }

  struct Call {
    std::string op;
    const float* data;
    int64_t n;
  };
  std::vector<Call> calls;
  // Value of peer `r` at element `i` of the buffer being reduced (i counted from `base`).
  std::function<float(int r, int64_t i)> peer_values = [](int, int64_t) { return 0.0f; };
  const float* base = nullptr;  // where element 0 of peer_values lives (the flat gradient buffer)
  // allgather answers: each call takes the next entry; when none is left every rank gives `value`.
  std::deque<std::vector<std::string>> gathered;
  std::deque<Heartbeat> inbox;
  std::vector<Heartbeat> sent;
  bool heartbeats = true;

  void allreduce_sum(float* data, int64_t n, Device) override {
    calls.push_back({"allreduce_sum", data, n});
    const int64_t first = base ? data - base : 0;
    for (int64_t i = 0; i < n; ++i)
      for (int r = 0; r < m_size; ++r)
        if (r != m_rank) data[i] += peer_values(r, first + i);
  }
  void broadcast(float* data, int64_t n, int, Device) override { calls.push_back({"broadcast", data, n}); }
  void broadcast_bytes(void*, size_t, int) override { calls.push_back({"broadcast_bytes", nullptr, 0}); }
  void barrier() override { calls.push_back({"barrier", nullptr, 0}); }
  std::vector<std::string> allgather(const std::string& value) override {
    if (!gathered.empty()) {
      std::vector<std::string> out = gathered.front();
      gathered.pop_front();
      return out;
    }
    return std::vector<std::string>(size_t(m_size), value);
  }
  bool has_heartbeats() const override { return heartbeats; }
  void send_heartbeat(const Heartbeat& h) override { sent.push_back(h); }
  bool poll_heartbeat(Heartbeat& out) override {
    if (inbox.empty()) return false;
    out = inbox.front();
    inbox.pop_front();
    return true;
  }
  [[noreturn]] void abort(int code) override { throw std::runtime_error("abort " + std::to_string(code)); }

 private:
  int m_rank, m_size;
};

}  // namespace cnn::test
