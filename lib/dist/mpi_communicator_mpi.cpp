// MPI communicator (see mpi_communicator.h). Collectives run on a duplicate of MPI_COMM_WORLD
// with MPI_ERRORS_RETURN, so a failed call becomes a cnn::Error instead of MPI's own abort;
// heartbeats travel on a second duplicate, so they never match a collective's messages.
// bf16 sums use a user-defined MPI_Op over 16-bit words: half the bytes of a float all-reduce,
// each partial sum rounded to bf16 as it is combined.
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <sstream>

#include "core/error.h"
#include "dist/bucket_math.h"
#include "dist/mpi_communicator.h"

#define MPI_CHECK(expr)                                                                                   \
  do {                                                                                                    \
    int cnn_mpi_rc_ = (expr);                                                                             \
    if (cnn_mpi_rc_ != MPI_SUCCESS) {                                                                     \
      char cnn_mpi_text_[MPI_MAX_ERROR_STRING] = {0};                                                     \
      int cnn_mpi_len_ = 0;                                                                               \
      MPI_Error_string(cnn_mpi_rc_, cnn_mpi_text_, &cnn_mpi_len_);                                        \
      ::cnn::throw_error(__FILE__, __LINE__, ::fmt::format("MPI error in {}: {}", #expr, cnn_mpi_text_)); \
    }                                                                                                     \
  } while (0)

namespace cnn {

namespace {

std::atomic<bool> g_communicator_exists{false};
constexpr int kHeartbeatTag = 7;
constexpr int kChunk = INT_MAX / 4;  // elements per MPI call (counts are int)

// call(offset, count) over [0, n) in chunks MPI's int counts can hold.
template <typename F>
void for_chunks(int64_t n, F call) {
  for (int64_t i = 0; i < n; i += kChunk) call(i, int(std::min<int64_t>(kChunk, n - i)));
}

// MPI works on host memory: device buffers go through `staging` (and back with from_host).
template <typename T>
T* to_host(T* data, int64_t n, Device where, std::vector<T>& staging) {
  if (where == Device::cpu) return data;
  staging.resize(size_t(n));
  device_memcpy(staging.data(), Device::cpu, data, where, size_t(n) * sizeof(T));
  return staging.data();
}

template <typename T>
void from_host(T* data, int64_t n, Device where, const std::vector<T>& staging) {
  if (where != Device::cpu) device_memcpy(data, where, staging.data(), Device::cpu, size_t(n) * sizeof(T));
}

void bf16_sum_op(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = float_to_bf16(bf16_to_float(a[i]) + bf16_to_float(b[i]));
}

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(const LaunchInfo& expected);
  ~MpiCommunicator() override;
  std::string kind() const override { return "mpi"; }
  int rank() const override { return m_rank; }
  int size() const override { return m_size; }
  int local_rank() const override { return m_local_rank; }
  int local_size() const override { return m_local_size; }
  std::string host() const override { return m_host; }

  void allreduce_sum(float* data, int64_t n, Device where) override;
  void broadcast(float* data, int64_t n, int root, Device where) override;
  void allreduce_sum_f64(double* data, int64_t n, Device where) override;
  void broadcast_bytes(void* data, size_t bytes, int root) override;
  void barrier() override { MPI_CHECK(MPI_Barrier(m_comm)); }
  std::vector<std::string> allgather(const std::string& value) override;

  bool has_heartbeats() const override { return m_hb != MPI_COMM_NULL; }
  void send_heartbeat(const Heartbeat& h) override;
  bool poll_heartbeat(Heartbeat& out) override;
  void close_heartbeats() override;

  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }
  std::vector<std::pair<std::string, std::string>> versions() const override;

 protected:
  void allreduce_sum_bf16_host(uint16_t* data, int64_t n) override;

 private:

  bool m_initialized_here = false;
  MPI_Comm m_comm = MPI_COMM_NULL, m_hb = MPI_COMM_NULL;
  MPI_Op m_bf16_op = MPI_OP_NULL;
  int m_rank = 0, m_size = 1, m_local_rank = 0, m_local_size = 1;
  std::string m_host;
  std::vector<float> m_staging;
  // Heartbeats: one send in flight per peer (its buffer must live until it completes).
  std::vector<MPI_Request> m_hb_requests;
  std::vector<Heartbeat> m_hb_out;
  std::vector<int64_t> m_hb_sent, m_hb_received;
};

MpiCommunicator::MpiCommunicator(const LaunchInfo& expected) {
  if (g_communicator_exists.exchange(true)) CNN_THROW("an MPI communicator already exists in this process");
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) CNN_THROW("MPI was already finalised in this process");
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
    m_initialized_here = true;
  } else {
    MPI_Query_thread(&provided);
  }
  MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &m_comm));
  MPI_CHECK(MPI_Comm_set_errhandler(m_comm, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(m_comm, &m_rank));
  MPI_CHECK(MPI_Comm_size(m_comm, &m_size));
  if (expected.launched && expected.world_size != m_size)
    CNN_THROW(
        "the launcher says {} ranks ({}) but MPI sees {}: each process started as its own MPI world. Under "
        "Slurm use srun --mpi=pmix (or pmi2) matching how MPI was built, or start with mpirun",
        expected.world_size, expected.source, m_size);
  MPI_Comm local = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split_type(m_comm, MPI_COMM_TYPE_SHARED, m_rank, MPI_INFO_NULL, &local));
  MPI_CHECK(MPI_Comm_rank(local, &m_local_rank));
  MPI_CHECK(MPI_Comm_size(local, &m_local_size));
  MPI_Comm_free(&local);
  char name[MPI_MAX_PROCESSOR_NAME] = {0};
  int len = 0;
  MPI_CHECK(MPI_Get_processor_name(name, &len));
  m_host.assign(name, size_t(len));
  MPI_CHECK(MPI_Op_create(&bf16_sum_op, 1, &m_bf16_op));
  // Heartbeats need a second thread inside MPI; without MPI_THREAD_MULTIPLE the watchdog still
  // runs but only knows about its own rank.
  if (provided == MPI_THREAD_MULTIPLE) {
    MPI_CHECK(MPI_Comm_dup(m_comm, &m_hb));
    m_hb_requests.assign(size_t(m_size), MPI_REQUEST_NULL);
    m_hb_out.resize(size_t(m_size));
    m_hb_sent.assign(size_t(m_size), 0);
    m_hb_received.assign(size_t(m_size), 0);
  }
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) {
    if (m_bf16_op != MPI_OP_NULL) MPI_Op_free(&m_bf16_op);
    if (m_hb != MPI_COMM_NULL) MPI_Comm_free(&m_hb);
    if (m_comm != MPI_COMM_NULL) MPI_Comm_free(&m_comm);
    if (m_initialized_here) MPI_Finalize();
  }
  g_communicator_exists = false;
}

void MpiCommunicator::allreduce_sum(float* data, int64_t n, Device where) {
  float* host = to_host(data, n, where, m_staging);
  for_chunks(n, [&](int64_t i, int count) {
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, host + i, count, MPI_FLOAT, MPI_SUM, m_comm));
  });
  from_host(data, n, where, m_staging);
}

// Small per-channel sums: device buffers take one round trip through host memory.
void MpiCommunicator::allreduce_sum_f64(double* data, int64_t n, Device where) {
  std::vector<double> staging;
  double* host = to_host(data, n, where, staging);
  for_chunks(n, [&](int64_t i, int count) {
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, host + i, count, MPI_DOUBLE, MPI_SUM, m_comm));
  });
  from_host(data, n, where, staging);
}

void MpiCommunicator::allreduce_sum_bf16_host(uint16_t* data, int64_t n) {
  for_chunks(n, [&](int64_t i, int count) {
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data + i, count, MPI_UINT16_T, m_bf16_op, m_comm));
  });
}

void MpiCommunicator::broadcast(float* data, int64_t n, int root, Device where) {
  float* host = to_host(data, n, where, m_staging);
  for_chunks(n, [&](int64_t i, int count) { MPI_CHECK(MPI_Bcast(host + i, count, MPI_FLOAT, root, m_comm)); });
  from_host(data, n, where, m_staging);
}

void MpiCommunicator::broadcast_bytes(void* data, size_t bytes, int root) {
  CNN_CHECK(bytes <= size_t(INT_MAX), "broadcast_bytes of {} bytes", bytes);
  MPI_CHECK(MPI_Bcast(data, int(bytes), MPI_BYTE, root, m_comm));
}

std::vector<std::string> MpiCommunicator::allgather(const std::string& value) {
  int len = int(value.size());
  std::vector<int> lens(static_cast<size_t>(m_size)), offsets(static_cast<size_t>(m_size));
  MPI_CHECK(MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, m_comm));
  int total = 0;
  for (int r = 0; r < m_size; ++r) offsets[size_t(r)] = total, total += lens[size_t(r)];
  std::string all(size_t(total), '\0');
  MPI_CHECK(MPI_Allgatherv(value.data(), len, MPI_CHAR, all.data(), lens.data(), offsets.data(), MPI_CHAR, m_comm));
  std::vector<std::string> out;
  for (int r = 0; r < m_size; ++r) out.push_back(all.substr(size_t(offsets[size_t(r)]), size_t(lens[size_t(r)])));
  return out;
}

void MpiCommunicator::send_heartbeat(const Heartbeat& h) {
  if (m_hb == MPI_COMM_NULL) return;
  for (int p = 0; p < m_size; ++p) {
    if (p == m_rank) continue;
    MPI_Request& req = m_hb_requests[size_t(p)];
    if (req != MPI_REQUEST_NULL) {
      int done = 0;
      if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || !done) continue;  // peer not draining
    }
    m_hb_out[size_t(p)] = h;
    if (MPI_Isend(&m_hb_out[size_t(p)], int(sizeof(Heartbeat)), MPI_BYTE, p, kHeartbeatTag, m_hb, &req) == MPI_SUCCESS)
      ++m_hb_sent[size_t(p)];
  }
}

bool MpiCommunicator::poll_heartbeat(Heartbeat& out) {
  if (m_hb == MPI_COMM_NULL) return false;
  int flag = 0;
  MPI_Status st;
  if (MPI_Iprobe(MPI_ANY_SOURCE, kHeartbeatTag, m_hb, &flag, &st) != MPI_SUCCESS || !flag) return false;
  if (MPI_Recv(&out, int(sizeof(Heartbeat)), MPI_BYTE, st.MPI_SOURCE, kHeartbeatTag, m_hb, MPI_STATUS_IGNORE) !=
      MPI_SUCCESS)
    return false;
  ++m_hb_received[size_t(st.MPI_SOURCE)];
  return true;
}

void MpiCommunicator::close_heartbeats() {
  if (m_hb == MPI_COMM_NULL) return;
  for (MPI_Request& req : m_hb_requests)
    if (req != MPI_REQUEST_NULL) MPI_CHECK(MPI_Wait(&req, MPI_STATUS_IGNORE));
  // Every message sent to us is received before the channel closes: exchange the counts, then
  // take exactly the ones still on the way.
  std::vector<int64_t> expected(static_cast<size_t>(m_size));
  MPI_CHECK(MPI_Alltoall(m_hb_sent.data(), 1, MPI_INT64_T, expected.data(), 1, MPI_INT64_T, m_hb));
  for (int p = 0; p < m_size; ++p) {
    Heartbeat h;
    for (int64_t k = m_hb_received[size_t(p)]; k < expected[size_t(p)]; ++k)
      MPI_CHECK(MPI_Recv(&h, int(sizeof(Heartbeat)), MPI_BYTE, p, kHeartbeatTag, m_hb, MPI_STATUS_IGNORE));
  }
  MPI_CHECK(MPI_Comm_free(&m_hb));
  m_hb = MPI_COMM_NULL;
}

std::vector<std::pair<std::string, std::string>> MpiCommunicator::versions() const {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0;
  MPI_Get_library_version(text, &len);
  std::string lib(text, size_t(len));
  lib = lib.substr(0, lib.find_first_of(",\n"));
  int major = 0, minor = 0;
  MPI_Get_version(&major, &minor);
  return {{"MPI", fmt::format("{} (MPI {}.{})", lib, major, minor)}};
}

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(const LaunchInfo& expected) {
  return std::make_unique<MpiCommunicator>(expected);
}

}  // namespace cnn
