// CudaContext in a build without CUDA: constructing one is an error.
#include "core/cuda_context.h"
#include "core/error.h"

namespace cnn {

CudaContext::CudaContext(int device) { CNN_THROW("this build has no CUDA support (CNN_WITH_CUDA=OFF)"); }
CudaContext::~CudaContext() = default;
void CudaContext::synchronize() const {}
double CudaContext::cudnn_handle_seconds() const { return -1; }
std::string CudaContext::module_loading() { return "unknown"; }

}  // namespace cnn
