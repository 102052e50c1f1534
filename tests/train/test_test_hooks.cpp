// The end-to-end tests' hooks reach the library through TrainOptions, parsed from variables the
// program looks up (the library reads no environment for them): a lookup is injected here.
#include <csignal>
#include <map>
#include <string>

#include "core/error.h"
#include "support/catch.h"
#include "train/test_hooks.h"

using namespace cnn;

namespace {

TestHooks hooks_of(const std::map<std::string, std::string>& vars) {
  return parse_test_hooks([&vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

}  // namespace

TEST_CASE("test hooks are off when no CNN_TEST_ variable is set", "[cpu]") {
  const TestHooks h = hooks_of({});
  CHECK(h.stop_at_step == 0);
  CHECK(h.kill_at_step == 0);
  for (int64_t step : {0, 1, 2}) {
    CHECK_FALSE(h.stops_after(step));
    CHECK_FALSE(h.stops_after(step, 0));
    CHECK_FALSE(h.kills_at(step, 0));
    CHECK_FALSE(h.kills_at(step, -1));
  }
}

TEST_CASE("the stop hook raises its signal after its step, on its rank only in data-parallel runs", "[cpu]") {
  TestHooks h = hooks_of({{"CNN_TEST_STOP_AT_STEP", "3"}});
  CHECK(h.stop_signal == SIGTERM);
  CHECK_FALSE(h.stops_after(2));
  CHECK(h.stops_after(3));
  CHECK(h.stops_after(3, 1));  // every rank
  h = hooks_of({{"CNN_TEST_STOP_AT_STEP", "9"}, {"CNN_TEST_STOP_SIGNAL", "INT"}, {"CNN_TEST_STOP_RANK", "1"}});
  CHECK(h.stop_signal == SIGINT);
  CHECK(h.stops_after(9, 1));
  CHECK_FALSE(h.stops_after(9, 0));
  CHECK(h.stops_after(9));  // the plain loop ignores the rank
  CHECK(hooks_of({{"CNN_TEST_STOP_AT_STEP", "1"}, {"CNN_TEST_STOP_SIGNAL", "2"}}).stop_signal == SIGINT);
  CHECK(hooks_of({{"CNN_TEST_STOP_AT_STEP", "1"}, {"CNN_TEST_STOP_SIGNAL", "15"}}).stop_signal == SIGTERM);
  // The signal and rank are read only with a step.
  CHECK(hooks_of({{"CNN_TEST_STOP_SIGNAL", "KILL"}}).stop_at_step == 0);
}

TEST_CASE("a malformed stop hook is an error naming the variable", "[cpu]") {
  CHECK_THROWS_WITH(hooks_of({{"CNN_TEST_STOP_AT_STEP", "soon"}}),
                    Catch::Matchers::Contains("CNN_TEST_STOP_AT_STEP is 'soon', expected a step number"));
  CHECK_THROWS_WITH(hooks_of({{"CNN_TEST_STOP_AT_STEP", "2"}, {"CNN_TEST_STOP_SIGNAL", "KILL"}}),
                    Catch::Matchers::Contains("CNN_TEST_STOP_SIGNAL is 'KILL', expected TERM or INT"));
}

TEST_CASE("the kill hook needs both its rank and its step, and stalls instead with mode stall", "[cpu]") {
  CHECK(hooks_of({{"CNN_TEST_KILL_AT_STEP", "3"}}).kill_at_step == 0);
  CHECK(hooks_of({{"CNN_TEST_KILL_RANK", "1"}}).kill_at_step == 0);
  TestHooks h = hooks_of({{"CNN_TEST_KILL_RANK", "1"}, {"CNN_TEST_KILL_AT_STEP", "3"}});
  CHECK(h.kills_at(3, 1));
  CHECK_FALSE(h.kills_at(3, 0));
  CHECK_FALSE(h.kills_at(2, 1));
  CHECK_FALSE(h.kill_stall);
  h = hooks_of({{"CNN_TEST_KILL_RANK", "0"}, {"CNN_TEST_KILL_AT_STEP", "5"}, {"CNN_TEST_KILL_MODE", "stall"}});
  CHECK(h.kills_at(5, 0));
  CHECK(h.kill_stall);
}
