// The MPI communicator across two real processes: this test binary starts itself under
// `mpirun -np 2` running the hidden worker test below, which checks the collectives, the bf16
// custom reduction, a GradReducer over MPI and the heartbeat channel from inside the job.
// Trap: the worker only makes sense under mpirun; run alone it skips.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "dist/bucket_math.h"
#include "dist/communicator.h"
#include "dist/grad_reducer.h"
#include "support/catch.h"
#include "support/test_util.h"

using namespace cnn;
using Catch::Matchers::Contains;

namespace {

// The mpirun on PATH, or "".
std::string find_mpirun() {
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "";
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    std::filesystem::path candidate = std::filesystem::path(p.substr(start, end - start)) / "mpirun";
    if (!candidate.empty() && access(candidate.c_str(), X_OK) == 0) return candidate.string();
    start = end + 1;
  }
  return "";
}

}  // namespace

// No commas in the name: the command line would read them as a list of test names.
const char* const kWorker = "mpi worker: collectives and bf16 sums and buckets and heartbeats across the ranks";

TEST_CASE("mpi worker: collectives and bf16 sums and buckets and heartbeats across the ranks", "[.mpi-worker]") {
  if (!detect_launch().launched) CNN_SKIP("only runs under mpirun (see the [mpi] test that starts it)");
  auto comm = make_communicator();
  REQUIRE(comm->kind() == "mpi");
  const int rank = comm->rank(), size = comm->size();
  REQUIRE(size == 2);
  CHECK(comm->local_size() == 2);
  CHECK(comm->local_rank() == rank);

  std::vector<float> x{float(rank + 1), 0.5f, -1.0f * float(rank)};
  comm->allreduce_sum(x.data(), 3);
  CHECK(x == std::vector<float>{3.0f, 1.0f, -1.0f});

  std::vector<float> b{float(rank * 10), 7.0f};
  comm->broadcast(b.data(), 2, 1);
  CHECK(b == std::vector<float>{10.0f, 7.0f});

  CHECK(comm->allgather(rank == 0 ? "zero" : "one!") == std::vector<std::string>{"zero", "one!"});
  CHECK_THROWS_WITH(check_same_on_all_ranks(*comm, "values", std::to_string(rank)), Contains("rank 1"));

  // bf16 through the custom MPI_Op: each value rounded, the sum rounded, divided in float.
  std::vector<float> g{1.0f + 1.0f / 128, 3.0f + float(rank)};
  comm->mean_async(g.data(), 2, Device::cpu, Compression::bf16);
  comm->wait_means();
  CHECK(g[0] == bf16_to_float(float_to_bf16(2.0f * (1.0f + 1.0f / 128))) / 2.0f);
  CHECK(g[1] == 3.5f);

  // A reducer over MPI: the mean of the two ranks' gradients, bucket by bucket.
  std::vector<float> grads(64);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = float(i) + float(rank) * 100.0f;
  std::vector<GradSpan> spans{{2, 32, 32}, {1, 16, 16}, {0, 0, 16}};
  GradReducer red(*comm, spans, 16 * 4 / 1048576.0, Compression::none, Device::cpu, grads.data());
  for (const auto& s : spans) red.on_ready(s.param);
  red.finish();
  for (size_t i = 0; i < grads.size(); ++i) CHECK(grads[i] == float(i) + 50.0f);

  REQUIRE(comm->has_heartbeats());
  Heartbeat h;
  h.rank = rank;
  h.step = 41 + rank;
  comm->send_heartbeat(h);
  comm->barrier();
  Heartbeat got;
  bool received = false;
  for (int i = 0; i < 1000 && !received; ++i) {
    received = comm->poll_heartbeat(got);
    if (!received) usleep(1000);
  }
  REQUIRE(received);
  CHECK(got.rank == 1 - rank);
  CHECK(got.step == 41 + (1 - rank));
  comm->send_heartbeat(h);  // left unreceived on purpose: closing must drain it
  comm->close_heartbeats();
  comm->barrier();
}

TEST_CASE("the MPI communicator works across two processes under mpirun", "[mpi]") {
  if (!build_has_mpi()) CNN_SKIP("this build has no MPI");
  const std::string mpirun = find_mpirun();
  if (mpirun.empty()) CNN_SKIP("mpirun is not on PATH");
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  test::TempDir dir("cnn-mpi");
  const std::string log = (dir / "log").string();
  const std::string cmd =
      fmt::format("'{}' --oversubscribe --allow-run-as-root -np 2 '{}' '{}' > '{}' 2>&1", mpirun, self, kWorker, log);
  int status = std::system(cmd.c_str());
  INFO(cmd << "\n" << test::read_text_file(log));
  CHECK(status == 0);
  CHECK_THAT(test::read_text_file(log), Contains("All tests passed"));
}
