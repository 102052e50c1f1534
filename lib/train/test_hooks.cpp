// The test hooks from their variables (see test_hooks.h).
#include "train/test_hooks.h"

#include <cstdlib>
#include <string>

#include "core/error.h"

namespace cnn {

TestHooks parse_test_hooks(const std::function<const char*(const char*)>& lookup) {
  auto get = [&lookup](const char* name) -> std::string {
    const char* v = lookup(name);
    return v ? v : "";
  };
  TestHooks h;
  if (const std::string at = get("CNN_TEST_STOP_AT_STEP"); !at.empty()) {
    try {
      h.stop_at_step = std::stoll(at);
    } catch (const std::exception&) {
      CNN_THROW("CNN_TEST_STOP_AT_STEP is '{}', expected a step number", at);
    }
    std::string sig = get("CNN_TEST_STOP_SIGNAL");
    if (sig.empty()) sig = "TERM";
    if (sig == "TERM" || sig == "15")
      h.stop_signal = SIGTERM;
    else if (sig == "INT" || sig == "2")
      h.stop_signal = SIGINT;
    else
      CNN_THROW("CNN_TEST_STOP_SIGNAL is '{}', expected TERM or INT", sig);
    if (const std::string r = get("CNN_TEST_STOP_RANK"); !r.empty()) h.stop_rank = std::atoi(r.c_str());
  }
  const std::string kill_at = get("CNN_TEST_KILL_AT_STEP"), kill_rank = get("CNN_TEST_KILL_RANK");
  if (!kill_at.empty() && !kill_rank.empty()) {
    h.kill_at_step = std::atoll(kill_at.c_str());
    h.kill_rank = std::atoi(kill_rank.c_str());
    h.kill_stall = get("CNN_TEST_KILL_MODE") == "stall";
  }
  return h;
}

}  // namespace cnn
