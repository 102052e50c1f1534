// The parts of the communicator every build has: launch detection, the single process, the
// synchronous mean (one division after the sum), bf16 rounding and the cross-rank equality check.
#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include "dist/bucket_math.h"
#include "dist/communicator.h"
#include "core/error.h"
#include "support/catch.h"
#include "dist/fake_communicator.h"

using namespace cnn;
using Catch::Matchers::Contains;

namespace {

LaunchInfo launch_with(const std::map<std::string, std::string>& vars) {
  return detect_launch([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

TEST_CASE("launch detection reads Open MPI, PMI and srun variables and nothing else", "[cpu]") {
  LaunchInfo none = launch_with({});
  CHECK_FALSE(none.launched);
  CHECK(none.world_size == 1);

  LaunchInfo ompi =
      launch_with({{"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}});
  CHECK(ompi.launched);
  CHECK(ompi.world_size == 4);
  CHECK(ompi.rank == 3);
  CHECK(ompi.local_rank == 1);
  CHECK(ompi.source == "OMPI_COMM_WORLD_SIZE");

  // One rank under mpirun is still a launch: the data-parallel path runs (and can be timed).
  CHECK(launch_with({{"OMPI_COMM_WORLD_SIZE", "1"}}).launched);

  LaunchInfo pmi = launch_with({{"PMI_SIZE", "2"}, {"PMI_RANK", "1"}, {"SLURM_LOCALID", "1"}});
  CHECK(pmi.launched);
  CHECK(pmi.rank == 1);
  CHECK(pmi.local_rank == 1);

  // A batch script's SLURM_NTASKS outside an srun step is not a launch.
  CHECK_FALSE(launch_with({{"SLURM_NTASKS", "8"}, {"SLURM_PROCID", "0"}}).launched);
  LaunchInfo srun =
      launch_with({{"SLURM_NTASKS", "8"}, {"SLURM_PROCID", "5"}, {"SLURM_LOCALID", "1"}, {"SLURM_STEP_ID", "0"}});
  CHECK(srun.launched);
  CHECK(srun.world_size == 8);
  CHECK(srun.rank == 5);
  CHECK(srun.local_rank == 1);

  CHECK_FALSE(launch_with({{"OMPI_COMM_WORLD_SIZE", "two"}}).launched);
}

TEST_CASE("the single-process communicator is the identity and skips nothing it is asked", "[cpu]") {
  auto comm = make_single_communicator();
  CHECK(comm->kind() == "single");
  CHECK_FALSE(comm->distributed());
  CHECK(comm->size() == 1);
  CHECK(comm->rank() == 0);
  CHECK_FALSE(comm->host().empty());
  std::vector<float> x{1.5f, -2.25f, 3.0f};
  comm->allreduce_sum(x.data(), 3);
  comm->mean_async(x.data(), 3, Device::cpu, Compression::none);
  comm->wait_means();
  CHECK(x == std::vector<float>{1.5f, -2.25f, 3.0f});
  CHECK(comm->allgather("abc") == std::vector<std::string>{"abc"});
  CHECK_THROWS(comm->broadcast(x.data(), 3, 1));
}

TEST_CASE("a synchronous communicator counts the time spent in gradient means as exposed, once", "[cpu]") {
  auto comm = make_single_communicator();
  CHECK(comm->take_exposed_ms() == 0.0);
  std::vector<float> x(1 << 20, 1.0f);
  comm->mean_async(x.data(), int64_t(x.size()), Device::cpu, Compression::bf16);  // rounds every value: takes time
  comm->wait_means();
  const double ms = comm->take_exposed_ms();
  CHECK(ms > 0.0);
  CHECK(ms < 60000.0);
  CHECK(comm->take_exposed_ms() == 0.0);  // taken: reset
  comm->mean_async(x.data(), 0, Device::cpu, Compression::none);  // nothing to reduce: nothing counted
  CHECK(comm->take_exposed_ms() == 0.0);
}

TEST_CASE("bf16 conversion rounds to nearest even and keeps NaN and infinity", "[cpu]") {
  CHECK(float_to_bf16(1.0f) == 0x3f80);
  CHECK(bf16_to_float(0x3f80) == 1.0f);
  // 1 + 2^-8 lies exactly between bf16 1.0 and 1 + 2^-7: ties go to the even mantissa (1.0).
  CHECK(float_to_bf16(from_bits(0x3f808000u)) == 0x3f80);
  // 1 + 3 * 2^-8 lies between 1 + 2^-7 (odd) and 1 + 2^-6: ties to even rounds up.
  CHECK(float_to_bf16(from_bits(0x3f818000u)) == 0x3f82);
  CHECK(float_to_bf16(from_bits(0x3f808001u)) == 0x3f81);  // just above the tie
  CHECK(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::isnan(bf16_to_float(float_to_bf16(from_bits(0x7f800001u)))));  // signalling NaN stays NaN
  CHECK(bf16_to_float(float_to_bf16(std::numeric_limits<float>::infinity())) == std::numeric_limits<float>::infinity());
  // Every bf16 value survives a round trip.
  for (uint32_t b = 0; b < 0x10000u; b += 7) {
    float f = bf16_to_float(uint16_t(b));
    if (std::isnan(f)) continue;
    CHECK(float_to_bf16(f) == uint16_t(b));
  }
  CHECK(bits(bf16_to_float(float_to_bf16(-0.0f))) == bits(-0.0f));
}

TEST_CASE("the synchronous mean sums over the ranks and then divides once by the world size", "[cpu]") {
  test::FakeCommunicator comm(0, 3);
  std::vector<float> g{1.0f, 0.1f, -7.0f, 1e-3f};
  const std::vector<float> mine = g;
  comm.base = g.data();
  comm.peer_values = [](int r, int64_t i) { return float(r) * 0.7f + float(i) * 0.3f; };
  comm.mean_async(g.data(), 4, Device::cpu, Compression::none);
  comm.wait_means();
  REQUIRE(comm.calls.size() == 1);
  for (int64_t i = 0; i < 4; ++i) {
    float sum = mine[size_t(i)];
    for (int r = 1; r < 3; ++r) sum += comm.peer_values(r, i);
    CHECK(bits(g[size_t(i)]) == bits(sum / 3.0f));  // x / 3, not x * (1/3): exact to the last bit
  }
}

TEST_CASE("the bf16 mean rounds each value to bf16, sums, and divides in float", "[cpu]") {
  test::FakeCommunicator comm(1, 2);
  std::vector<float> g{1.0f + 1.0f / 256, 3.14159f, -2.0f};
  std::vector<float> expected;
  for (size_t i = 0; i < g.size(); ++i) {
    float sum = bf16_to_float(float_to_bf16(g[i])) + bf16_to_float(float_to_bf16(0.5f));
    expected.push_back(bf16_to_float(float_to_bf16(sum)) / 2.0f);
  }
  comm.base = g.data();
  comm.peer_values = [](int, int64_t) { return 0.5f; };
  comm.mean_async(g.data(), 3, Device::cpu, Compression::bf16);
  CHECK(g == expected);
}

TEST_CASE("values that differ between ranks are an error naming each differing rank and its host", "[cpu]") {
  test::FakeCommunicator comm(0, 4);
  CHECK_NOTHROW(check_same_on_all_ranks(comm, "parameters", "abc"));
  comm.gathered.push_back({"aaaa", "aaaa", "bbbb", "cccc"});
  comm.gathered.push_back({"n0", "n0", "n1", "n2"});
  try {
    check_same_on_all_ranks(comm, "parameters", "aaaa");
    FAIL("no error");
  } catch (const Error& e) {
    std::string m = e.what();
    CHECK_THAT(m, Contains("parameters differ between ranks"));
    CHECK_THAT(m, Contains("rank 0 (n0) has aaaa"));
    CHECK_THAT(m, Contains("rank 2 (n1) has bbbb"));
    CHECK_THAT(m, Contains("rank 3 (n2) has cccc"));
    CHECK_THAT(m, !Contains("rank 1"));
  }
}

TEST_CASE("compression names parse strictly", "[cpu]") {
  CHECK(parse_compression("none") == Compression::none);
  CHECK(parse_compression("bf16") == Compression::bf16);
  CHECK_THROWS_WITH(parse_compression("fp16"), Contains("expected none or bf16"));
}
