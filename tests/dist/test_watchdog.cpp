// The watchdog's rules, driven by hand with a fake clock and fake heartbeats: a silent peer, a
// stall of this rank (naming the rank furthest behind), a termination signal while a peer is
// gone, and no alarm while everyone makes progress.
#include <chrono>
#include <mutex>
#include <thread>

#include "dist/watchdog.h"
#include "support/catch.h"
#include "dist/fake_communicator.h"

using namespace cnn;
using Catch::Matchers::Contains;

namespace {

Watchdog::Options manual(double timeout, int* signal = nullptr) {
  Watchdog::Options o;
  o.timeout_s = timeout;
  o.start_thread = false;
  o.suspended_after_s = 1e9;  // the fake clock jumps
  if (signal) o.stop_requested = [signal] { return *signal; };
  return o;
}

Heartbeat beat(int rank, Phase p, int64_t step, int64_t seq, double quiet = 0) {
  Heartbeat h;
  h.rank = rank;
  h.phase = int32_t(p);
  h.step = step;
  h.seq = seq;
  h.quiet_s = quiet;
  return h;
}

}  // namespace

TEST_CASE("a peer silent for longer than the timeout is named with its host, phase and step", "[cpu]") {
  test::FakeCommunicator comm(0, 3);
  Watchdog w(comm, {"a", "b", "c"}, manual(5));
  const double t0 = watchdog_clock();
  w.set(Phase::allreduce, 3);
  w.receive(beat(1, Phase::backward, 3, 1), t0);
  w.receive(beat(2, Phase::forward, 3, 1), t0);
  CHECK_FALSE(w.check(t0 + 1));
  w.receive(beat(1, Phase::allreduce, 3, 2), t0 + 4);
  auto msg = w.check(t0 + 5.5);
  REQUIRE(msg);
  CHECK_THAT(*msg, Contains("rank 2 (c) stopped responding"));
  CHECK_THAT(*msg, Contains("last reported phase forward at step 3"));
  CHECK_THAT(*msg, Contains("rank 0 (a)"));
  // It published its own status to the peers on every round.
  REQUIRE_FALSE(comm.sent.empty());
  CHECK(comm.sent.back().phase == int32_t(Phase::allreduce));
  CHECK(comm.sent.back().step == 3);
}

TEST_CASE("a rank stuck in one phase names the rank furthest behind", "[cpu]") {
  test::FakeCommunicator comm(0, 3);
  Watchdog w(comm, {"a", "b", "c"}, manual(5));
  const double t0 = watchdog_clock();
  w.set(Phase::allreduce, 7);
  CHECK_FALSE(w.check(t0));
  for (double t = 1; t <= 6; t += 1) {  // the peers keep talking, but rank 2 never leaves data
    w.receive(beat(1, Phase::allreduce, 7, 5, t), t0 + t);
    w.receive(beat(2, Phase::data, 7, 9, t), t0 + t);
  }
  auto msg = w.check(t0 + 5.2);
  REQUIRE(msg);
  CHECK_THAT(*msg, Contains("rank 0 (a) made no progress for 5.2 s in phase all-reduce at step 7"));
  CHECK_THAT(*msg, Contains("furthest behind: rank 2 (c) in phase data at step 7"));
}

TEST_CASE("a stalled rank that is itself furthest behind says so", "[cpu]") {
  test::FakeCommunicator comm(1, 2);
  Watchdog w(comm, {"a", "b"}, manual(2));
  const double t0 = watchdog_clock();
  w.set(Phase::forward, 4);
  w.check(t0);
  w.receive(beat(0, Phase::allreduce, 4, 3), t0 + 2);
  auto msg = w.check(t0 + 2.5);
  REQUIRE(msg);
  CHECK_THAT(*msg, Contains("rank 1 (b) made no progress"));
  CHECK_THAT(*msg, Contains("phase forward at step 4"));
  CHECK_THAT(*msg, Contains("this rank is the furthest behind"));
}

TEST_CASE("no alarm while phases change and heartbeats arrive", "[cpu]") {
  test::FakeCommunicator comm(0, 2);
  Watchdog w(comm, {"a", "b"}, manual(1));
  const double t0 = watchdog_clock();
  for (int i = 0; i < 100; ++i) {
    w.set(Phase(1 + i % 5), i / 5);
    w.receive(beat(1, Phase::backward, i / 5, i), t0 + 0.5 * i);
    CHECK_FALSE(w.check(t0 + 0.5 * i));
  }
  // finished is not a stall
  w.set_phase(Phase::finished);
  w.receive(beat(1, Phase::finished, 20, 101), t0 + 60);
  CHECK_FALSE(w.check(t0 + 60));
}

TEST_CASE("a termination signal while waiting on a silent peer is answered at once", "[cpu]") {
  int signal = 0;
  test::FakeCommunicator comm(0, 2);
  Watchdog w(comm, {"a", "b"}, manual(300, &signal));
  const double t0 = watchdog_clock();
  w.set(Phase::allreduce, 3);
  w.check(t0);
  w.receive(beat(1, Phase::forward, 3, 4), t0);
  CHECK_FALSE(w.check(t0 + 1));  // a long wait alone is fine within the timeout
  signal = 15;                   // mpirun tears the job down
  auto msg = w.check(t0 + 1.1);
  REQUIRE(msg);
  CHECK_THAT(*msg, Contains("terminated (signal 15)"));
  CHECK_THAT(*msg, Contains("rank 1 (b) stopped responding 1.1 s ago; it last reported phase forward at step 3"));
}

TEST_CASE("a termination signal with every peer alive is a normal stop", "[cpu]") {
  int signal = 15;
  test::FakeCommunicator comm(0, 2);
  Watchdog w(comm, {"a", "b"}, manual(300, &signal));
  const double t0 = watchdog_clock();
  w.set(Phase::allreduce, 3);
  w.check(t0);
  for (double t = 0; t < 3; t += 0.05) {
    w.receive(beat(1, Phase::allreduce, 3, 4, t), t0 + t);
    CHECK_FALSE(w.check(t0 + t));
  }
}

TEST_CASE("the watchdog thread reports through its fail action", "[cpu]") {
  test::FakeCommunicator comm(0, 1);
  comm.heartbeats = false;
  std::mutex m;
  std::string failure;
  Watchdog::Options o;
  o.timeout_s = 0.2;
  o.interval_s = 0.01;
  o.fail = [&](const std::string& msg) {
    std::lock_guard<std::mutex> lk(m);
    failure = msg;
  };
  Watchdog w(comm, {"a"}, o);
  w.set(Phase::optimizer, 2);
  for (int i = 0; i < 200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::lock_guard<std::mutex> lk(m);
    if (!failure.empty()) break;
  }
  std::lock_guard<std::mutex> lk(m);
  CHECK_THAT(failure, Contains("rank 0 (a) made no progress"));
  CHECK_THAT(failure, Contains("phase optimizer at step 2"));
}

TEST_CASE("a long gap between rounds restarts the clocks instead of blaming the peers", "[cpu]") {
  test::FakeCommunicator comm(1, 2);
  Watchdog::Options o = manual(3);
  o.suspended_after_s = 1.0;
  Watchdog w(comm, {"a", "b"}, o);
  const double t0 = watchdog_clock();
  w.set(Phase::allreduce, 9);
  w.receive(beat(0, Phase::backward, 9, 1), t0);
  CHECK_FALSE(w.check(t0));
  CHECK_FALSE(w.check(t0 + 10));  // this process was stopped for 10 s
  for (double t = 10.5; t < 13; t += 0.5) CHECK_FALSE(w.check(t0 + t));
  auto msg = w.check(t0 + 13.5);  // ... and after that the peer really is silent
  REQUIRE(msg);
  CHECK_THAT(*msg, Contains("rank 0 (a) stopped responding"));
}

TEST_CASE("phase names are the ones messages use", "[cpu]") {
  CHECK(std::string(to_string(Phase::allreduce)) == "all-reduce");
  CHECK(std::string(to_string(Phase::data)) == "data");
  CHECK(std::string(to_string(Phase::optimizer)) == "optimizer");
  const char* all[] = {"startup",   "data",     "forward",    "backward", "all-reduce",
                       "optimizer", "evaluate", "checkpoint", "finished"};
  for (int32_t i = 0; i <= int32_t(Phase::finished); ++i) CHECK(std::string(to_string(Phase(i))) == all[i]);
  // A peer's heartbeat carries the phase as a number: one out of range is named, not read past.
  CHECK(std::string(to_string(Phase(int32_t(Phase::finished) + 1))) == "unknown");
  CHECK(std::string(to_string(Phase(-1))) == "unknown");
}
