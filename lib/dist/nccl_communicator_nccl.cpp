// NCCL communicator (see nccl_communicator.h). Gradient means are queued on the communicator's own
// non-blocking stream, each after an event recorded on the context's stream (so a bucket starts
// as soon as backward has queued its last gradient kernel) and overlap the rest of backward;
// wait_means() makes the context's stream wait for all of them before the optimizer runs.
// bf16: pack to a staging buffer, ncclAllReduce in ncclBfloat16, unpack and divide in one kernel.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstdlib>

#include "core/cuda_check.h"
#include "core/error.h"
#include "dist/bucket_math.h"
#include "dist/nccl_communicator.h"

#define NCCL_CHECK(expr)                                                                                          \
  do {                                                                                                            \
    ncclResult_t cnn_nccl_rc_ = (expr);                                                                           \
    if (cnn_nccl_rc_ != ncclSuccess)                                                                              \
      ::cnn::throw_error(                                                                                         \
          __FILE__, __LINE__,                                                                                     \
          ::fmt::format("NCCL error {} ({}) in {}", int(cnn_nccl_rc_), ncclGetErrorString(cnn_nccl_rc_), #expr)); \
  } while (0)

namespace cnn {

namespace {

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(Communicator& host, const ExecContext& ctx);
  ~NcclCommunicator() override;
  std::string kind() const override { return "nccl"; }
  int rank() const override { return m_host.rank(); }
  int size() const override { return m_host.size(); }
  int local_rank() const override { return m_host.local_rank(); }
  int local_size() const override { return m_host.local_size(); }
  std::string host() const override { return m_host.host(); }

  void allreduce_sum(float* data, int64_t n, Device where) override;
  void broadcast(float* data, int64_t n, int root, Device where) override;
  void allreduce_sum_f64(double* data, int64_t n, Device where) override;
  void broadcast_bytes(void* data, size_t bytes, int root) override { m_host.broadcast_bytes(data, bytes, root); }
  void barrier() override { m_host.barrier(); }
  std::vector<std::string> allgather(const std::string& value) override { return m_host.allgather(value); }
  void mean_async(float* data, int64_t n, Device where, Compression c) override;
  void wait_means() override;
  double take_exposed_ms() override;

  bool has_heartbeats() const override { return m_host.has_heartbeats(); }
  void send_heartbeat(const Heartbeat& h) override { m_host.send_heartbeat(h); }
  bool poll_heartbeat(Heartbeat& out) override { return m_host.poll_heartbeat(out); }
  void close_heartbeats() override { m_host.close_heartbeats(); }
  [[noreturn]] void abort(int code) override {
    m_host.abort(code);
    std::_Exit(code);  // not reached: the host communicator's abort ends the process
  }
  std::vector<std::pair<std::string, std::string>> versions() const override;

 private:
  void after_context();  // the communicator's stream waits for the work queued so far
  Communicator& m_host;
  cudaStream_t m_ctx_stream = nullptr, m_stream = nullptr;
  cudaEvent_t m_ready = nullptr, m_done = nullptr, m_sums_done = nullptr;
  ncclComm_t m_comm = nullptr;
  uint16_t* m_bf16 = nullptr;  // staging (m_bf16_capacity)
  int64_t m_bf16_capacity = 0;
  bool m_pending = false;
  // Exposed reduction time: m_backward_end (compute stream) to m_means_end (this stream), read
  // once both have happened (at the next wait_means or take_exposed_ms).
  cudaEvent_t m_backward_end = nullptr, m_means_end = nullptr;
  bool m_timing = false;
  void collect_timing();
};

NcclCommunicator::NcclCommunicator(Communicator& host, const ExecContext& ctx) : m_host(host) {
  CNN_CHECK(ctx.device == Device::cuda && ctx.cuda_stream, "the NCCL communicator needs a CUDA context");
  m_ctx_stream = static_cast<cudaStream_t>(ctx.cuda_stream);
  ncclUniqueId id{};
  if (host.rank() == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  host.broadcast_bytes(&id, sizeof id, 0);
  NCCL_CHECK(ncclCommInitRank(&m_comm, host.size(), id, host.rank()));
  CUDA_CHECK(cudaStreamCreateWithFlags(&m_stream, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreateWithFlags(&m_ready, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&m_done, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&m_sums_done, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreate(&m_backward_end));
  CUDA_CHECK(cudaEventCreate(&m_means_end));
}

NcclCommunicator::~NcclCommunicator() {
  if (m_stream) cudaStreamSynchronize(m_stream);
  if (m_comm) ncclCommDestroy(m_comm);
  if (m_bf16) cudaFree(m_bf16);
  if (m_ready) cudaEventDestroy(m_ready);
  if (m_done) cudaEventDestroy(m_done);
  if (m_sums_done) cudaEventDestroy(m_sums_done);
  if (m_backward_end) cudaEventDestroy(m_backward_end);
  if (m_means_end) cudaEventDestroy(m_means_end);
  if (m_stream) cudaStreamDestroy(m_stream);
}

void NcclCommunicator::after_context() {
  CUDA_CHECK(cudaEventRecord(m_ready, m_ctx_stream));
  CUDA_CHECK(cudaStreamWaitEvent(m_stream, m_ready, 0));
}

void NcclCommunicator::allreduce_sum(float* data, int64_t n, Device where) {
  if (where == Device::cpu) return m_host.allreduce_sum(data, n, where);
  after_context();
  NCCL_CHECK(ncclAllReduce(data, data, size_t(n), ncclFloat, ncclSum, m_comm, m_stream));
  CUDA_CHECK(cudaStreamSynchronize(m_stream));
}

// On the communicator's stream like every other NCCL call here (one stream per communicator keeps
// the ranks' NCCL calls in one order), with the context's stream waiting on it: nothing blocks
// the host, but the next compute kernel starts only once the sums are in. Trap: bucket means
// queued earlier on this stream run first, so a batchnorm backward waits for them.
void NcclCommunicator::allreduce_sum_f64(double* data, int64_t n, Device where) {
  if (where == Device::cpu) return m_host.allreduce_sum_f64(data, n, where);
  if (n <= 0) return;
  after_context();
  NCCL_CHECK(ncclAllReduce(data, data, size_t(n), ncclFloat64, ncclSum, m_comm, m_stream));
  CUDA_CHECK(cudaEventRecord(m_sums_done, m_stream));
  CUDA_CHECK(cudaStreamWaitEvent(m_ctx_stream, m_sums_done, 0));
}

void NcclCommunicator::broadcast(float* data, int64_t n, int root, Device where) {
  if (where == Device::cpu) return m_host.broadcast(data, n, root, where);
  after_context();
  NCCL_CHECK(ncclBroadcast(data, data, size_t(n), ncclFloat, root, m_comm, m_stream));
  CUDA_CHECK(cudaStreamSynchronize(m_stream));
}

void NcclCommunicator::mean_async(float* data, int64_t n, Device where, Compression c) {
  if (where == Device::cpu) return m_host.mean_async(data, n, where, c);
  if (n <= 0) return;
  after_context();
  const float world = float(size());
  if (c == Compression::bf16) {
    if (n > m_bf16_capacity) {
      CUDA_CHECK(cudaStreamSynchronize(m_stream));
      if (m_bf16) CUDA_CHECK(cudaFree(m_bf16));
      m_bf16 = nullptr;
      CUDA_CHECK(cudaMalloc(&m_bf16, size_t(n) * sizeof(uint16_t)));
      m_bf16_capacity = n;
    }
    // One staging buffer serves every bucket: they run one after another on m_stream.
    pack_bf16_cuda(m_stream, data, m_bf16, n);
    NCCL_CHECK(ncclAllReduce(m_bf16, m_bf16, size_t(n), ncclBfloat16, ncclSum, m_comm, m_stream));
    unpack_bf16_divide_cuda(m_stream, m_bf16, data, n, world);
  } else if (size() == 1) {
    // One rank: the in-place sum is the mean and NCCL copies nothing; ncclAvg would launch a
    // kernel that multiplies every gradient by 1, and a divide pass would read and write them all.
    NCCL_CHECK(ncclAllReduce(data, data, size_t(n), ncclFloat, ncclSum, m_comm, m_stream));
  } else {
    // ncclAvg scales inside the reduction (each rank's share by 1/world): no second pass over the
    // bucket (on vgg_fer that pass read and wrote 120 MB of gradients a step).
    NCCL_CHECK(ncclAllReduce(data, data, size_t(n), ncclFloat, ncclAvg, m_comm, m_stream));
  }
  m_pending = true;
}

void NcclCommunicator::wait_means() {
  if (!m_pending) return;
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(m_ctx_stream, &capturing));
  if (capturing == cudaStreamCaptureStatusNone) {  // timing events are not for graphs
    collect_timing();
    CUDA_CHECK(cudaEventRecord(m_backward_end, m_ctx_stream));
    CUDA_CHECK(cudaEventRecord(m_means_end, m_stream));
    m_timing = true;
  }
  CUDA_CHECK(cudaEventRecord(m_done, m_stream));
  CUDA_CHECK(cudaStreamWaitEvent(m_ctx_stream, m_done, 0));
  m_pending = false;
}

void NcclCommunicator::collect_timing() {
  if (!m_timing) return;
  CUDA_CHECK(cudaEventSynchronize(m_means_end));
  CUDA_CHECK(cudaEventSynchronize(m_backward_end));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, m_backward_end, m_means_end));
  m_exposed_ms += std::max(0.0f, ms);
  m_timing = false;
}

double NcclCommunicator::take_exposed_ms() {
  collect_timing();
  return Communicator::take_exposed_ms() + m_host.take_exposed_ms();
}

std::vector<std::pair<std::string, std::string>> NcclCommunicator::versions() const {
  auto v = m_host.versions();
  v.emplace_back("NCCL", nccl_library_version());
  return v;
}

}  // namespace

std::string nccl_library_version() {
  int code = 0;
  if (ncclGetVersion(&code) != ncclSuccess) return "unknown";
  return fmt::format("{}.{}.{}", code / 10000, (code % 10000) / 100, code % 100);
}

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& host, const ExecContext& ctx) {
  return std::make_unique<NcclCommunicator>(host, ctx);
}

}  // namespace cnn
