// Turns a dead or stalled rank into a message and the end of the job, never a silent hang. Each
// rank publishes its phase and step (set_phase: two atomic stores on the hot path); a thread
// sends them to the peers as heartbeats every interval and checks: (1) a peer not heard from for
// timeout_s (dead, stopped, or its host gone), (2) this rank stuck in one phase for timeout_s,
// naming the rank that is furthest behind, (3) a termination signal arriving while this rank is
// stuck in a collective and a peer has gone quiet (mpirun tearing the job down after a rank died:
// it allows about a second before SIGKILL, so this is answered within a few intervals).
// The message names the rank, its host, its phase and step; then the job is aborted.
// Trap: a single phase longer than timeout_s (a huge validation split, a slow checkpoint write)
// counts as a stall: raise dist.timeout_s for those.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "dist/communicator.h"

namespace cnn {

enum class Phase : int32_t { startup, data, forward, backward, allreduce, optimizer, evaluate, checkpoint, finished };
const char* to_string(Phase p);  // "data", "all-reduce", ...

class Watchdog {
 public:
  struct Options {
    double timeout_s = 300;
    double interval_s = 0.05;                      // heartbeat and check period
    double grace_s = 0.3;                          // rule (3): quiet time that counts once a termination signal arrived
    // A gap this long between two rounds means this process itself was not running (SIGSTOP, a
    // swapped-out host): that round only restarts every clock, blaming nobody.
    double suspended_after_s = 1.0;
    bool start_thread = true;                      // false: tests call check() themselves
    std::function<int()> stop_requested;           // the pending signal number, or 0
    std::function<void(const std::string&)> fail;  // default: print to stderr, comm.abort(1)
  };
  // hosts: every rank's host name (comm.allgather(comm.host())).
  Watchdog(Communicator& comm, std::vector<std::string> hosts, Options options);
  ~Watchdog();  // stops the thread; not collective
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void set(Phase p, int64_t step) {
    m_step.store(step, std::memory_order_relaxed);
    m_phase.store(int32_t(p), std::memory_order_relaxed);
    m_seq.fetch_add(1, std::memory_order_release);
  }
  void set_phase(Phase p) {
    m_phase.store(int32_t(p), std::memory_order_relaxed);
    m_seq.fetch_add(1, std::memory_order_release);
  }
  Phase phase() const { return Phase(m_phase.load(std::memory_order_relaxed)); }
  int64_t step() const { return m_step.load(std::memory_order_relaxed); }

  // Collective: stops the thread and closes the heartbeat channel on every rank at one point.
  void finish();

  // One round of the thread's work at time `now` (seconds, steady clock): sends a heartbeat,
  // takes the peers', and returns the failure message, if any. Public for tests.
  std::optional<std::string> check(double now);
  // Feeds a peer's heartbeat as if received at `now` (tests; the thread uses the communicator).
  void receive(const Heartbeat& h, double now);

 private:
  struct Peer {
    Heartbeat last;
    bool heard = false;
    double heard_at = 0;  // local time of the last heartbeat (the start time before the first)
  };
  void run();
  std::string status_of(int rank, double now) const;
  std::string diagnose_stall(double now, double quiet) const;

  Communicator& m_comm;
  std::vector<std::string> m_hosts;
  Options m_opt;
  std::atomic<int32_t> m_phase{int32_t(Phase::startup)};
  std::atomic<int64_t> m_step{0};
  std::atomic<uint64_t> m_seq{0};
  uint64_t m_seen_seq = ~uint64_t(0);
  double m_changed_at = 0, m_started_at = 0, m_last_check = 0;
  std::vector<Peer> m_peers;
  std::mutex m_mutex;
  std::condition_variable m_cv;
  bool m_stop = false;
  std::thread m_thread;
};

double watchdog_clock();  // steady clock, seconds

}  // namespace cnn
