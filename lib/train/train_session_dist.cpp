// Data-parallel parts of a training run: rank set-up, the weight broadcast and check, the
// bucketed step every rank runs, and resuming with another world size.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "train/train_session.h"

namespace cnn {

namespace fs = std::filesystem;

namespace {

// Sync batchnorm's per-channel sums through the run's communicator (NCCL on GPU ranks: ordered on
// the compute stream; MPI: blocking, device buffers through the host once the stream is idle).
class CommStatsReducer final : public StatsReducer {
 public:
  CommStatsReducer(Communicator& comm, const DeviceSetup& dev) : m_comm(comm), m_dev(dev) {}
  void sum(double* data, int64_t n, Device where) override {
    if (where == Device::cuda && m_comm.kind() != "nccl") m_dev.synchronize();
    m_comm.allreduce_sum_f64(data, n, where);
  }

 private:
  Communicator& m_comm;
  const DeviceSetup& m_dev;
};

}  // namespace

// Test hook of the failure tests: CNN_TEST_KILL_RANK=r CNN_TEST_KILL_AT_STEP=k makes rank r die
// (_exit(9)) 0.3 s into the forward pass of step k, or hang there for good with
// CNN_TEST_KILL_MODE=stall (its watchdog thread keeps reporting). Not for users.
void TrainSession::read_dist_test_hook() {
  const char* at = std::getenv("CNN_TEST_KILL_AT_STEP");
  const char* rank = std::getenv("CNN_TEST_KILL_RANK");
  if (!at || !*at || !rank || !*rank) return;
  m_test_kill_step = std::atoll(at);
  m_test_kill_rank = std::atoi(rank);
  const char* mode = std::getenv("CNN_TEST_KILL_MODE");
  m_test_kill_stall = mode && std::string(mode) == "stall";
  if (m_test_kill_rank == m_rank)
    spdlog::warn("test hook: this rank will {} at step {}", m_test_kill_stall ? "stall" : "die", m_test_kill_step);
}

// Buckets in the order backward finalises parameters (last node first), NCCL for GPU ranks, and
// the world-size arithmetic in the log.
void TrainSession::setup_data_parallel() {
  const TrainSpec& t = m_spec.train;
  // Last node first, and within a node its parameters last first too (they become final together):
  // the spans then fall in the flat buffer in strictly decreasing order, so a bucket boundary
  // between a layer's weight and bias still leaves the buckets' ranges disjoint.
  std::vector<GradSpan> order;
  for (int i = m_model->graph().size() - 1; i >= 0; --i) {
    const std::vector<int>& params = m_model->graph().node(i).params;
    for (auto it = params.rbegin(); it != params.rend(); ++it) {
      const ParamEntry& e = m_model->graph().params()[size_t(*it)];
      if (e.trainable) order.push_back({*it, e.offset, e.shape.numel()});
    }
  }
  m_reduce_comm = m_comm;
  if (ctx().device == Device::cuda) {
    phase(Phase::startup);
    m_nccl = make_device_communicator(*m_comm, ctx());
    if (m_nccl)
      m_reduce_comm = m_nccl.get();
    else
      spdlog::warn("this build has no NCCL: GPU gradients are reduced by MPI through host memory (slow)");
  }
  m_reducer =
      std::make_unique<GradReducer>(*m_reduce_comm, std::move(order), m_spec.dist.bucket_mb,
                                    parse_compression(m_spec.dist.compress), ctx().device, m_model->executor().grads().data());
  // NCCL means are stream-ordered: the step's forward, backward and means can be captured.
  if (ctx().device == Device::cuda) {
    m_model->step().set_device_reduce(m_nccl != nullptr);
    if (!m_nccl)
      m_model->step().set_cuda_graph(false, "data-parallel without NCCL: gradient means go through host memory");
  }
  spdlog::info("CUDA graph: {}", m_model->step().cuda_graph_status());
  if (m_watch) {
    Watchdog* w = m_watch.get();
    m_reducer->set_blocking_observer([w](bool blocked) { w->set_phase(blocked ? Phase::allreduce : Phase::backward); });
  }
  // dist.sync_batchnorm: every batchnorm normalises with the statistics of the global batch.
  int synced = 0;
  if (m_spec.dist.sync_batchnorm) {
    m_stats_reducer = std::make_unique<CommStatsReducer>(*m_reduce_comm, m_model->device());
    for (int i = 0; i < m_model->graph().size(); ++i) synced += m_model->graph().node(i).layer->set_stats_reducer(m_stats_reducer.get());
    m_model->step().set_sync_batchnorm(synced > 0);
  }
  const int64_t global = t.batch_size * m_world;
  spdlog::info(
      "data-parallel: {} rank{} ({} communicator, {} on this host), per-rank batch {}, global batch {} ({} x {}), "
      "{} steps per epoch, sync batchnorm: {}",
      m_world, m_world == 1 ? "" : "s", m_reduce_comm->kind(), m_comm->local_size(), t.batch_size, global, t.batch_size,
      m_world, m_train_loader->batches_per_epoch(),
      m_spec.dist.sync_batchnorm ? fmt::format("on ({} layer{})", synced, synced == 1 ? "" : "s") : "off");
  spdlog::info(
      "learning rate {} -> {} (train.lr_scaling: {}, world size {}){}", t.optimizer.lr, m_schedule->base_lr(), t.lr_scaling, m_world,
      t.schedule.warmup_epochs > 0 ? fmt::format("; warmup over {} epochs still applies", t.schedule.warmup_epochs)
                                   : "");
  spdlog::info("gradients: {} bucket(s) of up to {} MiB, compress {}, averaged over {} rank(s)",
               m_reducer->buckets().size(), m_spec.dist.bucket_mb, m_spec.dist.compress, m_world);
}

// The checkpoint's cursor counts global batches of its own world size: move it to ours at the
// same sample position, or to the end of the epoch when no batch boundary falls there.
void TrainSession::convert_resume_cursor(int64_t old_world) {
  const int64_t batch = m_spec.train.batch_size, n = m_data.train.size(), old_global = batch * old_world;
  const int64_t old_batches = m_spec.data.drop_last ? n / old_global : (n + old_global - 1) / old_global;
  CursorMove mv = convert_data_cursor(m_epoch, m_next_batch, batch, old_world, m_world, old_batches,
                                      m_train_loader->batches_per_epoch());
  if (mv.exact) {
    spdlog::info(
        "the checkpoint was written by {} rank(s), this run has {}: data cursor batch {} of {} samples -> "
        "batch {} of {} samples (sample {} of epoch {})",
        old_world, m_world, m_next_batch, old_global, mv.next_batch, batch * m_world, mv.position, m_epoch + 1);
  } else {
    spdlog::warn(
        "the checkpoint was written by {} rank(s), this run has {}: epoch {} stopped after {} samples, "
        "which is no multiple of the new global batch {}; the rest of epoch {} is skipped and training "
        "continues at the next epoch boundary",
        old_world, m_world, m_epoch + 1, mv.position, batch * m_world, m_epoch + 1);
  }
  m_next_batch = mv.next_batch;
}

// Every rank, every global batch (a rank without samples still joins): forward and backward with
// bucketed averaging, then one small all-reduce in which the ranks agree on the step (a stop
// signal, a non-finite loss anywhere) and sum its loss and hits; then the update.
StepStats TrainSession::dist_step(const Batch& b, double lr, int64_t epoch) {
  const int64_t n = b.size();
  if (m_step + 1 == m_test_kill_step && m_rank == m_test_kill_rank) {
    phase(Phase::forward);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the heartbeat carries the phase
    if (!m_test_kill_stall) _exit(9);
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(60));
  }
  if (n > 0) load_input(b);
  const int64_t global = m_spec.train.batch_size * m_world;
  const double weight = share_weight(n, global_batch_samples(b.index, global, m_data.train.size()), m_world);
  TrainStep::Result r = m_model->step().forward_backward(b.labels.data(), n, uint64_t(m_step), m_spec.train.seed,
                                                       *m_reducer, weight, m_watch.get());
  // allreduce_exposed_ms is timed on uncaptured steps only (a graph replay records no timing events).
  if (!m_model->step().last_step_replayed()) ++m_dist_steps_in_epoch;
  const bool bad = n > 0 && !std::isfinite(r.loss);
  if (m_step + 1 == m_test_stop_step && (m_test_stop_rank < 0 || m_test_stop_rank == m_rank))
    std::raise(m_test_stop_signal);
  const int sig = stop_requested();
  float v[6] = {sig == SIGTERM ? 1.0f : 0.0f,
                sig == SIGINT ? 1.0f : 0.0f,
                bad ? 1.0f : 0.0f,
                bad ? 0.0f : float(r.loss * double(n)),
                float(r.correct),
                float(n)};
  phase(Phase::allreduce);
  m_comm->allreduce_sum(v, 6);
  if (v[2] > 0) {
    std::vector<std::string> flags = m_comm->allgather(bad ? "1" : "0");
    std::string ranks;
    for (size_t i = 0; i < flags.size(); ++i)
      if (flags[i] == "1") ranks += fmt::format("{}{}", ranks.empty() ? "" : ", ", i);
    diverged(b, epoch, bad ? r.loss : std::nan(""), ranks);
  }
  phase(Phase::optimizer);
  m_model->step().update(lr);
  return {double(v[3]), double(v[4]), int64_t(v[5]), v[0] > 0 ? SIGTERM : v[1] > 0 ? SIGINT : 0};
}

// Every rank starts from rank 0's weights, and proves it: the same config and data everywhere,
// then a checksum of the parameters and buffers compared across ranks.
void TrainSession::start_data_parallel() {
  phase(Phase::startup);
  const std::string identity = to_yaml(m_spec.config) + "\n" + m_data.fingerprint;
  check_same_on_all_ranks(*m_comm,
                          "the resolved configurations or the datasets (checksum of config and data fingerprint)",
                          compute_checksum(identity.data(), identity.size()));
  m_reduce_comm->broadcast(m_model->executor().params().data(), m_model->graph().params_size(), 0, ctx().device);
  if (m_model->graph().buffers_size() > 0)
    m_reduce_comm->broadcast(m_model->executor().buffers().data(), m_model->graph().buffers_size(), 0, ctx().device);
  std::vector<float> p = m_model->executor().params().to_vector(), q = m_model->executor().buffers().to_vector();
  uint32_t crc = crc32c(p.data(), p.size() * sizeof(float));
  crc = crc32c(q.data(), q.size() * sizeof(float), crc);
  check_same_on_all_ranks(*m_comm, "the parameters after the broadcast from rank 0 (CRC-32C)", checksum_hex(crc));
}

}  // namespace cnn
