// KernelTrace without CUDA (kernel_trace.h): there is no device to trace.
#include "bench/kernel_trace.h"

#include "core/error.h"

namespace cnn {

bool KernelTrace::available() { return false; }
KernelTrace::~KernelTrace() = default;
void KernelTrace::start() { CNN_THROW("kernel tracing needs a CUDA build (this one was built without CUDA)"); }
std::vector<KernelRecord> KernelTrace::stop(uint64_t*) { return {}; }

}  // namespace cnn
