// The watchdog's thread and its three rules (see watchdog.h).
#include "dist/watchdog.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iterator>

#include "core/error.h"

namespace cnn {

const char* to_string(Phase p) {
  // In the order of the enum; the assert catches a phase added without its name.
  static constexpr const char* kNames[] = {"startup",   "data",     "forward",    "backward", "all-reduce",
                                           "optimizer", "evaluate", "checkpoint", "finished"};
  static_assert(std::size(kNames) == size_t(Phase::finished) + 1, "a Phase without a name");
  const auto i = size_t(p);
  return i < std::size(kNames) ? kNames[i] : "unknown";
}

double watchdog_clock() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Progress order: who is "furthest behind". evaluate/checkpoint follow a step's optimizer.
static int64_t progress_key(Phase p, int64_t step) {
  static const int order[] = {0, 1, 2, 3, 4, 5, 6, 7, 9};
  return step * 10 + order[int(p)];
}

Watchdog::Watchdog(Communicator& comm, std::vector<std::string> hosts, Options options)
    : m_comm(comm), m_hosts(std::move(hosts)), m_opt(std::move(options)) {
  CNN_CHECK(int(m_hosts.size()) == comm.size(), "{} host names for {} ranks", m_hosts.size(), comm.size());
  CNN_CHECK(m_opt.timeout_s > 0, "dist.timeout_s must be > 0, got {}", m_opt.timeout_s);
  m_started_at = m_changed_at = watchdog_clock();
  m_peers.resize(size_t(comm.size()));
  for (Peer& p : m_peers) p.heard_at = m_started_at;
  if (!m_opt.fail) {
    m_opt.fail = [this](const std::string& msg) {
      std::fprintf(stderr, "error: %s\n", msg.c_str());
      std::fflush(stderr);
      m_comm.abort(1);
    };
  }
  if (m_opt.start_thread) m_thread = std::thread([this] { run(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lk(m_mutex);
    m_stop = true;
  }
  m_cv.notify_all();
  if (m_thread.joinable()) m_thread.join();
}

void Watchdog::finish() {
  set_phase(Phase::finished);
  {
    std::lock_guard<std::mutex> lk(m_mutex);
    m_stop = true;
  }
  m_cv.notify_all();
  if (m_thread.joinable()) m_thread.join();
  m_comm.close_heartbeats();
}

void Watchdog::run() {
  std::unique_lock<std::mutex> lk(m_mutex);
  while (!m_stop) {
    lk.unlock();
    std::optional<std::string> failure = check(watchdog_clock());
    if (failure) {
      m_opt.fail(*failure);
      return;
    }
    lk.lock();
    m_cv.wait_for(lk, std::chrono::duration<double>(m_opt.interval_s), [&] { return m_stop; });
  }
}

void Watchdog::receive(const Heartbeat& h, double now) {
  if (h.rank < 0 || size_t(h.rank) >= m_peers.size()) return;
  Peer& p = m_peers[size_t(h.rank)];
  p.last = h;
  p.heard = true;
  p.heard_at = now;
}

std::string Watchdog::status_of(int rank, double now) const {
  const std::string who = fmt::format("rank {} ({})", rank, m_hosts[size_t(rank)]);
  if (rank == m_comm.rank())
    return fmt::format("{} in phase {} at step {} (no progress for {:.1f} s)", who, to_string(phase()), step(),
                       now - m_changed_at);
  const Peer& p = m_peers[size_t(rank)];
  if (!p.heard)
    return fmt::format("{}, never heard from since the watchdog started {:.1f} s ago", who, now - p.heard_at);
  return fmt::format("{} in phase {} at step {} (no progress for {:.1f} s, heard {:.1f} s ago)", who,
                     to_string(Phase(p.last.phase)), p.last.step, p.last.quiet_s + (now - p.heard_at),
                     now - p.heard_at);
}

std::string Watchdog::diagnose_stall(double now, double quiet) const {
  const int me = m_comm.rank();
  std::string msg = fmt::format("rank {} ({}) made no progress for {:.1f} s in phase {} at step {} (dist.timeout_s {})",
                                me, m_hosts[size_t(me)], quiet, to_string(phase()), step(), m_opt.timeout_s);
  if (m_comm.size() == 1) return msg;
  if (!m_comm.has_heartbeats()) return msg + "; the other ranks' phases are unknown (MPI without thread support)";
  int behind = me;
  int64_t key = progress_key(phase(), step());
  for (int r = 0; r < m_comm.size(); ++r) {
    const Peer& p = m_peers[size_t(r)];
    if (r == me) continue;
    if (!p.heard) {  // never reported: as far behind as a rank can be
      behind = r;
      key = -1;
      continue;
    }
    int64_t k = progress_key(Phase(p.last.phase), p.last.step);
    if (k < key) behind = r, key = k;
  }
  if (behind == me) return msg + "; this rank is the furthest behind";
  return msg + "; furthest behind: " + status_of(behind, now);
}

std::optional<std::string> Watchdog::check(double now) {
  const uint64_t seq = m_seq.load(std::memory_order_acquire);
  if (seq != m_seen_seq) {
    m_seen_seq = seq;
    m_changed_at = now;
  }
  // This process was not running for a while: the peers' silence is our own doing.
  const bool resumed = m_last_check > 0 && now - m_last_check > m_opt.suspended_after_s;
  m_last_check = now;
  if (resumed) {
    for (Peer& p : m_peers) p.heard_at = std::max(p.heard_at, now);
    m_changed_at = now;
  }
  const double quiet = now - m_changed_at;
  const int me = m_comm.rank();
  if (m_comm.has_heartbeats()) {
    Heartbeat h;
    h.rank = me;
    h.phase = int32_t(phase());
    h.step = step();
    h.seq = int64_t(seq);
    h.quiet_s = quiet;
    m_comm.send_heartbeat(h);
    while (m_comm.poll_heartbeat(h)) receive(h, now);
    for (int r = 0; r < m_comm.size(); ++r) {
      if (r == me) continue;
      const double age = now - m_peers[size_t(r)].heard_at;
      if (age > m_opt.timeout_s)
        return fmt::format(
            "watchdog: rank {} ({}) stopped responding: nothing heard from it for {:.1f} s "
            "(dist.timeout_s {}); {}. This rank: {}",
            r, m_hosts[size_t(r)], age, m_opt.timeout_s,
            m_peers[size_t(r)].heard
                ? "it last reported phase " + std::string(to_string(Phase(m_peers[size_t(r)].last.phase))) +
                      fmt::format(" at step {}", m_peers[size_t(r)].last.step)
                : "it never reported",
            status_of(me, now));
    }
  }
  if (phase() != Phase::finished && quiet > m_opt.timeout_s) return "watchdog: " + diagnose_stall(now, quiet);
  const int sig = m_opt.stop_requested ? m_opt.stop_requested() : 0;
  if (sig && quiet > m_opt.grace_s && m_comm.has_heartbeats()) {
    int stalest = -1;
    double worst = m_opt.grace_s;
    for (int r = 0; r < m_comm.size(); ++r) {
      if (r == me) continue;
      const double age = now - m_peers[size_t(r)].heard_at;
      if (age > worst) stalest = r, worst = age;
    }
    if (stalest >= 0) {
      const Peer& p = m_peers[size_t(stalest)];
      return fmt::format(
          "watchdog: the job is being terminated (signal {}) while rank {} ({}) waits in phase {} at step {}: "
          "rank {} ({}) stopped responding {:.1f} s ago; {}",
          sig, me, m_hosts[size_t(me)], to_string(phase()), step(), stalest, m_hosts[size_t(stalest)], worst,
          p.heard ? fmt::format("it last reported phase {} at step {}", to_string(Phase(p.last.phase)), p.last.step)
                  : std::string("it never reported"));
    }
  }
  return std::nullopt;
}

}  // namespace cnn
