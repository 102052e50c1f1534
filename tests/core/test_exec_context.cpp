// The CPU thread count of a run: OMP_NUM_THREADS (its first value) when set, else the cores; a
// malformed value is an error naming the variable, never silently replaced.
#include "core/error.h"
#include "core/exec_context.h"
#include "support/catch.h"

using namespace cnn;
using Catch::Matchers::Contains;

TEST_CASE("cpu threads come from OMP_NUM_THREADS when it is set, else from the cores", "[cpu]") {
  CpuThreads t = cpu_threads_from(nullptr, 6);
  CHECK(t.count == 6);
  CHECK(std::string(t.source) == "cores");
  CHECK(cpu_threads_from("", 3).count == 3);
  CHECK(cpu_threads_from("  ", 0).count == 1);  // no core count known: one thread
  t = cpu_threads_from("1", 6);
  CHECK(t.count == 1);
  CHECK(std::string(t.source) == "OMP_NUM_THREADS");
  CHECK(cpu_threads_from(" 12 ", 2).count == 12);
  CHECK(cpu_threads_from("4,2", 8).count == 4);  // nested levels: ours is the outermost
}

TEST_CASE("a malformed OMP_NUM_THREADS is an error that names the variable and the value", "[cpu]") {
  for (const char* bad : {"abc", "0", "-2", "2x", "1.5", ",3", "99999999999999999999", "5000"}) {
    INFO(bad);
    CHECK_THROWS_AS(cpu_threads_from(bad, 2), Error);
    CHECK_THROWS_WITH(cpu_threads_from(bad, 2), Contains("OMP_NUM_THREADS='" + std::string(bad) + "'"));
  }
}

TEST_CASE("a cpu context made without a thread count resolves one and keeps it", "[cpu]") {
  const ExecContext ctx = ExecContext::cpu(0);
  CHECK(ctx.num_threads >= 1);
  CHECK(ctx.threads() == ctx.num_threads);
  CHECK(ExecContext::cpu(3).threads() == 3);
  CHECK(available_cores() >= 1);
}
