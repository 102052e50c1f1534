// KernelTrace through CUPTI's activity API (kernel_trace.h): concurrent-kernel records, which
// include the kernel nodes of replayed CUDA graphs, delivered in buffers CUPTI asks us for.
#include <cuda_runtime.h>
#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <mutex>

#include "bench/kernel_trace.h"
#include "core/error.h"

namespace cnn {

namespace {

constexpr size_t kBufferBytes = size_t(8) << 20;
constexpr size_t kBufferAlign = 8;

std::mutex g_mutex;
std::vector<KernelRecord> g_records;  // filled by buffer_completed while a trace runs
bool g_callbacks_registered = false;

const char* cupti_message(CUptiResult r) {
  const char* s = nullptr;
  cuptiGetResultString(r, &s);
  return s ? s : "unknown CUPTI error";
}

#define CNN_CUPTI(call)                                                                          \
  do {                                                                                           \
    CUptiResult cnn_cupti_r = (call);                                                            \
    CNN_CHECK(cnn_cupti_r == CUPTI_SUCCESS, "kernel tracing: {} failed: {}", #call, cupti_message(cnn_cupti_r)); \
  } while (0)

std::string demangle(const char* name) {
  if (!name) return "?";
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(name, nullptr, nullptr, &status), std::free);
  return status == 0 && d ? std::string(d.get()) : std::string(name);
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kBufferAlign, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  std::vector<KernelRecord> got;
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && rec->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
    got.push_back({demangle(k->name), k->start, k->end});
  }
  std::free(buffer);
  std::lock_guard<std::mutex> lock(g_mutex);
  g_records.insert(g_records.end(), got.begin(), got.end());
}

}  // namespace

bool KernelTrace::available() { return true; }

KernelTrace::~KernelTrace() {
  if (m_running) {
    cudaDeviceSynchronize();
    cuptiActivityFlushAll(1);
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  }
}

void KernelTrace::start() {
  CNN_CHECK(!m_running, "kernel tracing: start() while a trace runs");
  if (!g_callbacks_registered) {
    CNN_CUPTI(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
    g_callbacks_registered = true;
  }
  cudaError_t e = cudaDeviceSynchronize();
  CNN_CHECK(e == cudaSuccess, "kernel tracing: the device failed before the trace: {}", cudaGetErrorString(e));
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_records.clear();
  }
  CNN_CUPTI(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
  CNN_CUPTI(cuptiGetTimestamp(&m_t0));
  m_running = true;
}

std::vector<KernelRecord> KernelTrace::stop(uint64_t* window_ns) {
  CNN_CHECK(m_running, "kernel tracing: stop() without start()");
  cudaError_t e = cudaDeviceSynchronize();
  uint64_t t1 = 0;
  cuptiGetTimestamp(&t1);
  m_running = false;
  CNN_CUPTI(cuptiActivityFlushAll(1));
  CNN_CUPTI(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
  CNN_CHECK(e == cudaSuccess, "kernel tracing: the device failed during the trace: {}", cudaGetErrorString(e));
  std::vector<KernelRecord> out;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    out.swap(g_records);
  }
  // Only what ran inside the window (a kernel queued before start() was finished by its sync).
  out.erase(std::remove_if(out.begin(), out.end(), [&](const KernelRecord& r) { return r.start_ns < m_t0 || r.start_ns > t1; }),
            out.end());
  std::sort(out.begin(), out.end(), [](const KernelRecord& a, const KernelRecord& b) { return a.start_ns < b.start_ns; });
  if (window_ns) *window_ns = t1 - m_t0;
  return out;
}

}  // namespace cnn
