// The ranks of a data-parallel job and their collectives, behind one host-includable interface:
// a single process (world size 1, always available), MPI (host memory; device buffers travel
// through the host) and NCCL (device buffers, on the communicator's own CUDA stream).
// Trap: every rank must call the collectives in the same order with the same sizes; a rank with
// no samples in a step still joins every reduction (with zeros), or the others wait forever.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/exec_context.h"

namespace cnn {

enum class Compression { none, bf16 };
Compression parse_compression(const std::string& text);  // "none" | "bf16"

// What the launcher's environment says, read before (and without) initialising MPI.
struct LaunchInfo {
  bool launched = false;  // started by mpirun/srun/mpiexec: use MPI even with one rank
  int world_size = 1, rank = 0, local_rank = 0;
  std::string source;  // the variable that told us, e.g. "OMPI_COMM_WORLD_SIZE"
};
// Open MPI (OMPI_COMM_WORLD_*), MPICH/Hydra and Slurm PMI (PMI_SIZE/PMI_RANK), MVAPICH
// (MV2_COMM_WORLD_*), and Slurm's srun steps (SLURM_STEP_ID with SLURM_NTASKS/SLURM_PROCID/
// SLURM_LOCALID; a batch script outside srun is not a launch). `env` is getenv in production.
LaunchInfo detect_launch(const std::function<const char*(const char*)>& env);
LaunchInfo detect_launch();

// A rank's status as its watchdog publishes it (plain bytes on the wire).
struct Heartbeat {
  int32_t rank = 0;
  int32_t phase = 0;  // a Phase (watchdog.h)
  int64_t step = 0;
  int64_t seq = 0;     // changes whenever phase or step changes
  double quiet_s = 0;  // seconds since that change, on the sender's clock
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual std::string kind() const = 0;  // "single", "mpi", "nccl"
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int local_rank() const = 0;  // among the ranks of this host
  virtual int local_size() const = 0;
  virtual std::string host() const = 0;
  // False only for a plain process nobody launched: the trainer then skips communication.
  bool distributed() const { return kind() != "single"; }

  // In place. `where` says which memory `data` is in (device memory: the current CUDA device).
  virtual void allreduce_sum(float* data, int64_t n, Device where = Device::cpu) = 0;
  virtual void broadcast(float* data, int64_t n, int root, Device where = Device::cpu) = 0;
  // Sum of a few doubles (sync batchnorm's per-channel sums), in place, ordered on the compute
  // stream: its result is ready for the next kernel queued on the bound context's stream (MPI: on
  // return; device buffers go through the host). This base version only serves a world of one.
  virtual void allreduce_sum_f64(double* data, int64_t n, Device where = Device::cpu);
  virtual void broadcast_bytes(void* data, size_t bytes, int root) = 0;  // host memory
  virtual void barrier() = 0;
  // Small host values (a checksum, a version string), one per rank in rank order.
  virtual std::vector<std::string> allgather(const std::string& value) = 0;

  // Gradient averaging: data <- (sum over ranks) / size(), the division done once, after the sum.
  // May return before the result is ready (NCCL queues it on its own stream after the work
  // already queued on the bound context's stream); wait_means() orders the context's stream after
  // every started mean. This base version is synchronous: MPI and the single process use it.
  virtual void mean_async(float* data, int64_t n, Device where, Compression c);
  virtual void wait_means() {}
  // Milliseconds the step waited for gradient means since the last call (then resets): for the
  // synchronous base version the whole time spent in mean_async; for NCCL the time from the end of
  // backward on the compute stream to the end of the last mean (0 when they finished first).
  virtual double take_exposed_ms();

  // The watchdog's side channel (its own thread calls these; they never block on a peer).
  virtual bool has_heartbeats() const { return false; }
  virtual void send_heartbeat(const Heartbeat& h) {}
  virtual bool poll_heartbeat(Heartbeat& out) { return false; }
  virtual void close_heartbeats() {}  // collective: every rank, at the same point

  // Ends the whole job at once (MPI_Abort; a single process exits), from any thread.
  [[noreturn]] virtual void abort(int code) = 0;

  // Library versions for `cnn-train doctor`, e.g. {"MPI", "Open MPI v4.1.4"}.
  virtual std::vector<std::pair<std::string, std::string>> versions() const { return {}; }

 protected:
  // Sum of bfloat16 values in host memory; the default widens to float, sums and rounds back.
  virtual void allreduce_sum_bf16_host(uint16_t* data, int64_t n);
  // The body of the synchronous mean_async (untimed).
  void mean_sync(float* data, int64_t n, Device where, Compression c);

 protected:
  double m_exposed_ms = 0;

 private:
  std::vector<float> m_host_staging;
  std::vector<uint16_t> m_bf16_staging;
};

// World size 1, no launcher: every collective is the identity (mean rounds through bf16 when asked).
std::unique_ptr<Communicator> make_single_communicator();
// The process's communicator: MPI when a launcher started it (MPI_Init_thread happens here, once
// per process), else the single process. An MPI launch in a build without MPI is an error.
std::unique_ptr<Communicator> make_communicator();
// For ranks on the GPU: NCCL over `host`'s ranks (collective: every rank calls it), bound to
// ctx's stream; null when this build has no NCCL (then `host` reduces through host memory).
std::unique_ptr<Communicator> make_device_communicator(Communicator& host, const ExecContext& ctx);
bool build_has_mpi();
bool build_has_nccl();
std::string nccl_version();  // the NCCL library's version, "" in a build without NCCL

// Throws a cnn::Error naming the ranks (and their hosts) whose value differs from rank 0's, e.g.
// "parameters differ between ranks: rank 0 (a) has 1f2e3d4c, rank 2 (b) has 00aa11bb".
void check_same_on_all_ranks(Communicator& comm, const std::string& what, const std::string& value);

}  // namespace cnn
