// The data-parallel side of a training run (see dist_context.h): rank set-up, the weight broadcast
// and check, and the bucketed step every rank runs.
#include "train/dist_context.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <thread>

#include "checkpoint/checksum.h"
#include "dist/world_math.h"
#include "train/signals.h"

namespace cnn {

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

DistContext::DistContext(Communicator& comm, const ModelSpec& spec, const TrainOptions& options,
                         std::function<void(const std::string&)> record_fatal)
    : m_comm(comm), m_spec(spec), m_hooks(options.test_hooks), m_reduce(&comm) {
  Watchdog::Options wo;
  wo.timeout_s = spec.dist.timeout_s;
  wo.stop_requested = [] { return stop_requested(); };
  wo.fail = [this, &options, record_fatal = std::move(record_fatal)](const std::string& msg) {  // the watchdog's thread
    record_fatal(msg);
    if (options.on_fatal) options.on_fatal(msg, 1);
    std::fprintf(stderr, "error: %s\n", msg.c_str());
    m_comm.abort(1);
  };
  m_watch = std::make_unique<Watchdog>(m_comm, m_comm.allgather(m_comm.host()), wo);
}

DistContext::~DistContext() = default;

void DistContext::share_autotune(AutotuneOptions& tune) {
  tune.tune = rank() == 0;
  tune.share = [this](const std::string& mine) { return m_comm.allgather(mine).at(0); };
}

void DistContext::setup(ModelStack& model, const DataPipeline& data, double base_lr) {
  const TrainSpec& t = m_spec.train;
  const Graph& graph = model.graph();
  const Device device = model.ctx().device;
  // Last node first, and within a node its parameters last first too (they become final together):
  // the spans then fall in the flat buffer in strictly decreasing order, so a bucket boundary
  // between a layer's weight and bias still leaves the buckets' ranges disjoint.
  std::vector<GradSpan> order;
  for (int i = graph.size() - 1; i >= 0; --i) {
    const std::vector<int>& params = graph.node(i).params;
    for (auto it = params.rbegin(); it != params.rend(); ++it) {
      const ParamEntry& e = graph.params()[size_t(*it)];
      if (e.trainable) order.push_back({*it, e.offset, e.shape.numel()});
    }
  }
  if (device == Device::cuda) {
    phase(Phase::startup);
    m_nccl = make_device_communicator(m_comm, model.ctx());
    if (m_nccl)
      m_reduce = m_nccl.get();
    else
      spdlog::warn("this build has no NCCL: GPU gradients are reduced by MPI through host memory (slow)");
  }
  m_reducer = std::make_unique<GradReducer>(*m_reduce, std::move(order), m_spec.dist.bucket_mb,
                                            parse_compression(m_spec.dist.compress), device,
                                            model.executor().grads().data());
  // NCCL means are stream-ordered: the step's forward, backward and means can be captured.
  if (device == Device::cuda) {
    model.step().set_device_reduce(m_nccl != nullptr);
    if (!m_nccl) model.step().set_cuda_graph(false, "data-parallel without NCCL: gradient means go through host memory");
  }
  spdlog::info("CUDA graph: {}", model.step().cuda_graph_status());
  Watchdog* w = m_watch.get();
  m_reducer->set_blocking_observer([w](bool blocked) { w->set_phase(blocked ? Phase::allreduce : Phase::backward); });
  // dist.sync_batchnorm: every batchnorm normalises with the statistics of the global batch.
  int synced = 0;
  if (m_spec.dist.sync_batchnorm) {
    m_stats_reducer = std::make_unique<CommStatsReducer>(*m_reduce, model.device());
    for (int i = 0; i < graph.size(); ++i) synced += graph.node(i).layer->set_stats_reducer(m_stats_reducer.get());
    model.step().set_sync_batchnorm(synced > 0);
  }
  const int world = this->world();
  const int64_t global = t.batch_size * world;
  spdlog::info(
      "data-parallel: {} rank{} ({} communicator, {} on this host), per-rank batch {}, global batch {} ({} x {}), "
      "{} steps per epoch, sync batchnorm: {}",
      world, world == 1 ? "" : "s", m_reduce->kind(), m_comm.local_size(), t.batch_size, global, t.batch_size, world,
      data.batches_per_epoch(),
      m_spec.dist.sync_batchnorm ? fmt::format("on ({} layer{})", synced, synced == 1 ? "" : "s") : "off");
  spdlog::info(
      "learning rate {} -> {} (train.lr_scaling: {}, world size {}){}", t.optimizer.lr, base_lr, t.lr_scaling, world,
      t.schedule.warmup_epochs > 0 ? fmt::format("; warmup over {} epochs still applies", t.schedule.warmup_epochs)
                                   : "");
  spdlog::info("gradients: {} bucket(s) of up to {} MiB, compress {}, averaged over {} rank(s)",
               m_reducer->buckets().size(), m_spec.dist.bucket_mb, m_spec.dist.compress, world);
}

void DistContext::start(ModelStack& model, const DataPipeline& data) {
  phase(Phase::startup);
  const std::string identity = to_yaml(m_spec.config) + "\n" + data.splits().fingerprint;
  check_same_on_all_ranks(m_comm,
                          "the resolved configurations or the datasets (checksum of config and data fingerprint)",
                          compute_checksum(identity.data(), identity.size()));
  const Device device = model.ctx().device;
  const Graph& graph = model.graph();
  Executor& ex = model.executor();
  m_reduce->broadcast(ex.params().data(), graph.params_size(), 0, device);
  if (graph.buffers_size() > 0) m_reduce->broadcast(ex.buffers().data(), graph.buffers_size(), 0, device);
  std::vector<float> p = ex.params().to_vector(), q = ex.buffers().to_vector();
  uint32_t crc = crc32c(p.data(), p.size() * sizeof(float));
  crc = crc32c(q.data(), q.size() * sizeof(float), crc);
  check_same_on_all_ranks(m_comm, "the parameters after the broadcast from rank 0 (CRC-32C)", checksum_hex(crc));
}

StepStats DistContext::step(ModelStack& model, DataPipeline& data, const Batch& b, double lr, int64_t step,
                            const std::function<void(double loss, const std::string& ranks)>& diverged) {
  const int64_t n = b.size();
  if (m_hooks.kills_at(step + 1, rank())) {
    phase(Phase::forward);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the heartbeat carries the phase
    if (!m_hooks.kill_stall) _exit(9);
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(60));
  }
  if (n > 0) data.load_input(model.executor(), b);
  const int64_t global = m_spec.train.batch_size * world();
  const double weight = share_weight(n, global_batch_samples(b.index, global, data.splits().train.size()), world());
  TrainStep::Result r = model.step().forward_backward(b.labels.data(), n, uint64_t(step), m_spec.train.seed,
                                                      *m_reducer, weight, m_watch.get());
  // allreduce_exposed_ms is timed on uncaptured steps only (a graph replay records no timing events).
  if (!model.step().last_step_replayed()) ++m_steps_timed;
  const bool bad = n > 0 && !std::isfinite(r.loss);
  if (m_hooks.stops_after(step + 1, rank())) std::raise(m_hooks.stop_signal);
  const int sig = stop_requested();
  float v[6] = {sig == SIGTERM ? 1.0f : 0.0f,
                sig == SIGINT ? 1.0f : 0.0f,
                bad ? 1.0f : 0.0f,
                bad ? 0.0f : float(r.loss * double(n)),
                float(r.correct),
                float(n)};
  phase(Phase::allreduce);
  m_comm.allreduce_sum(v, 6);
  if (v[2] > 0) {
    std::vector<std::string> flags = m_comm.allgather(bad ? "1" : "0");
    std::string ranks;
    for (size_t i = 0; i < flags.size(); ++i)
      if (flags[i] == "1") ranks += fmt::format("{}{}", ranks.empty() ? "" : ", ", i);
    diverged(bad ? r.loss : std::nan(""), ranks);
  }
  phase(Phase::optimizer);
  model.step().update(lr);
  return {double(v[3]), double(v[4]), int64_t(v[5]), v[0] > 0 ? SIGTERM : v[1] > 0 ? SIGINT : 0};
}

void DistContext::average_buffers(ModelStack& model) {
  if (model.graph().buffers_size() == 0) return;
  phase(Phase::allreduce);
  m_reduce->mean_async(model.executor().buffers().data(), model.graph().buffers_size(), model.ctx().device,
                       Compression::none);
  m_reduce->wait_means();
}

void DistContext::broadcast_from_rank0(double* values, size_t n) {
  phase(Phase::allreduce);
  m_comm.broadcast_bytes(values, n * sizeof(double), 0);
}

std::optional<double> DistContext::take_exposed_ms() {
  if (m_steps_timed == 0) return std::nullopt;
  const double ms = m_reduce->take_exposed_ms() / double(m_steps_timed);
  m_steps_timed = 0;
  return ms;
}

}  // namespace cnn
