// The start-up breakdown on given times: consecutive phases summing to the total, parts carved out
// of an interval, absent phases that take no time, the first epoch's extra cost split into parts
// that sum to it, and the cases where it cannot be told.
#include "core/process_clock.h"
#include "support/catch.h"
#include "train/startup_breakdown.h"

using namespace cnn;
using Catch::Matchers::Contains;

namespace {

double sum_of_parts(const nlohmann::json& first_epoch) {
  double s = 0;
  for (const auto& p : first_epoch["parts"]) s += p["seconds"].get<double>();
  return s;
}

}  // namespace

TEST_CASE("startup breakdown phases are consecutive, parts are carved out and absent phases take no time", "[cpu]") {
  StartupBreakdown b("test origin");
  b.mark("loading", 0.5);
  b.absent("MPI init", "a plain process");
  b.mark("device", 1.25, "", {{"context", 0.5, ""}, {"stream", -1, "CPU run"}, {"cublas", 0.25, ""}});
  b.mark("autotune", 2.0, "cache warm", {{"too long", 5.0, ""}});  // cut to the 0.75 s the interval has
  b.set_steady(2);
  const nlohmann::json j = b.to_json();
  const auto& p = j["phases"];
  REQUIRE(p.size() == 8);
  const std::vector<std::string> names{"loading", "MPI init", "context", "stream", "cublas", "device", "too long",
                                       "autotune"};
  for (size_t i = 0; i < names.size(); ++i) CHECK(p[i]["name"] == names[i]);
  CHECK(p[1]["seconds"].is_null());
  CHECK(p[1]["absent"] == "a plain process");
  CHECK(p[3]["seconds"].is_null());
  CHECK(p[2]["seconds"].get<double>() == Approx(0.5));
  CHECK(p[4]["seconds"].get<double>() == Approx(0.25));
  CHECK(p[5]["seconds"].get<double>() == Approx(0.0).margin(1e-9));  // the device phase's own rest
  CHECK(p[6]["seconds"].get<double>() == Approx(0.75));
  CHECK(p[7]["seconds"].get<double>() == Approx(0.0).margin(1e-9));
  double at = 0;
  for (const auto& phase : p) {
    CHECK(phase["start_s"].get<double>() == Approx(at));
    if (!phase["seconds"].is_null()) at += phase["seconds"].get<double>();
  }
  CHECK(j["total_s"].get<double>() == Approx(2.0));
  CHECK(b.phases_sum_s() == Approx(b.total_s()));
  CHECK(j["steady_from_step"] == 2);
  CHECK(j["origin"] == "test origin");
  const std::string t = b.table();
  CHECK_THAT(t, Contains("start-up, seconds since the test origin"));
  CHECK_THAT(t, Contains("absent  (CPU run)"));
  CHECK_THAT(t, Contains("(cache warm)"));
  CHECK_THAT(t, Contains("step 2 is the first at steady speed"));
}

TEST_CASE("startup breakdown lists work beside the main line where it began, outside the total", "[cpu]") {
  StartupBreakdown b;
  b.mark("graph build", 0.5);
  b.mark("driver init", 0.6);
  b.mark("device set-up", 0.9);
  b.mark("waiting for the data", 1.0);
  b.beside("data read (beside)", 0.55, 0.44, "own thread");  // began inside the driver init
  b.mark("loaders", 1.1);
  const nlohmann::json j = b.to_json();
  const auto& p = j["phases"];
  REQUIRE(p.size() == 6);
  CHECK(p[2]["name"] == "data read (beside)");  // after the phases that began before it
  CHECK(p[2]["beside"] == true);
  CHECK(p[2]["start_s"].get<double>() == Approx(0.55));
  CHECK(p[2]["seconds"].get<double>() == Approx(0.44));
  CHECK(p[2]["note"] == "own thread");
  CHECK(!p[1].contains("beside"));
  CHECK(p[3]["name"] == "device set-up");
  // The total is the wall time: the main line's phases, the wait included, not the work beside them.
  CHECK(j["total_s"].get<double>() == Approx(1.1));
  CHECK(b.phases_sum_s() == Approx(1.1));
  const std::string t = b.table();
  CHECK_THAT(t, Contains("  | data read (beside)"));
  CHECK_THAT(t, Contains("  waiting for the data "));
}

TEST_CASE("startup breakdown splits the first epoch's extra cost into parts that sum to it", "[cpu]") {
  StartupBreakdown b;
  b.mark("set-up", 1.0);
  b.mark("first step", 1.5);
  b.note_warmup_step(0.5);
  b.set_steady(2);
  // Epoch 1: 10 steps, 1.4 s of them (0.5 the first), 0.3 s evaluation, 0.1 s checkpoints.
  b.add_epoch({1, 10, 1.4, 0.3, 0.1, 1.9, 2.9, true});
  b.add_epoch({2, 10, 1.0, 0.1, 0.05, 1.2, 4.1, true});
  b.add_epoch({3, 10, 1.0, 0.1, 0.05, 1.3, 5.4, true});
  b.add_epoch({4, 10, 1.0, 0.1, 0.05, 1.1, 6.5, true});
  const nlohmann::json f = b.to_json()["first_epoch"];
  REQUIRE(f.is_object());
  CHECK(f["later_epochs"] == 3);
  CHECK(f["later_median_s"].get<double>() == Approx(1.2));
  CHECK(f["steady_step_s"].get<double>() == Approx(0.1));
  CHECK(f["extra_s"].get<double>() == Approx(0.7));
  CHECK(sum_of_parts(f) == Approx(0.7));
  CHECK(f["parts"][0]["seconds"].get<double>() == Approx(0.4));  // the warm-up step over the steady 0.1 s
  CHECK(f["parts"][1]["seconds"].get<double>() == Approx(0.0).margin(1e-9));  // 1.4 - 1.0 - 0.4
  CHECK(f["parts"][2]["seconds"].get<double>() == Approx(0.2));
  CHECK(f["parts"][3]["seconds"].get<double>() == Approx(0.05));
  CHECK(f["start_over_steady_epoch_s"].get<double>() == Approx(2.9 - 1.2));
  CHECK_THAT(b.table(), Contains("first epoch: 1.900 s against 1.200 s, the median of 3 later epochs: 0.700 s extra"));
}

TEST_CASE("startup breakdown says why the first epoch's extra cost is absent", "[cpu]") {
  StartupBreakdown one;
  one.add_epoch({1, 10, 1.0, 0.1, 0.0, 1.1, 2.0, true});
  CHECK(one.to_json()["first_epoch"].is_null());
  CHECK(one.to_json()["first_epoch_absent"] == "no later epoch to compare with");
  CHECK_THAT(one.table(), Contains("first epoch's extra cost: absent (no later epoch to compare with)"));
  StartupBreakdown resumed;
  resumed.add_epoch({3, 4, 0.4, 0.1, 0.0, 0.5, 1.0, false});
  resumed.add_epoch({4, 10, 1.0, 0.1, 0.0, 1.1, 2.0, true});
  CHECK(resumed.to_json()["first_epoch_absent"] == "the segment began mid-epoch (resumed)");
  StartupBreakdown none;
  CHECK(none.to_json()["first_epoch_absent"] == "no epoch finished");
  CHECK(none.to_json()["steady_from_step"].is_null());
  CHECK_THAT(none.table(), Contains("training stopped before a step ran at steady speed"));
}

TEST_CASE("the process clock starts at the OS's process start, before the static initialisers", "[cpu]") {
  const double a = process_seconds(), b = process_seconds();
  CHECK(b >= a);
  CHECK(process_static_init_seconds() >= 0);
  CHECK(a >= process_static_init_seconds());
#ifdef __linux__
  CHECK(process_start_known());
  CHECK(process_start_resolution() > 0);
  CHECK(process_start_resolution() <= 0.01);  // USER_HZ is 100 on Linux
#endif
}
