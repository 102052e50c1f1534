// Stand-in for gpu_dataset_cuda.cu in a build without CUDA: constructing a GpuDataset throws (so
// data.gpu_resident: on fails loudly) and no GPU memory is ever reported free, so fits() is false.
#include "core/error.h"
#include "data/gpu_dataset.h"

namespace cnn {

struct GpuDataset::State {};

[[noreturn]] static void no_cuda(const char* what) {
  CNN_THROW("{} called but this build has no CUDA (GPU-resident data needs CNN_WITH_CUDA)", what);
}

GpuDataset::GpuDataset(const Dataset& data, const LoaderOptions& options, const Normalization& norm,
                       const AugmentSpec& augment, const ExecContext& cuda_ctx) {
  no_cuda("GpuDataset");
}
GpuDataset::~GpuDataset() = default;
size_t GpuDataset::device_free_bytes() { return 0; }
void GpuDataset::start_epoch(int64_t epoch) { no_cuda("GpuDataset::start_epoch"); }
void GpuDataset::make_batch(int64_t b, void* images, const BatchFormat& format, int32_t* labels, int64_t& n) {
  no_cuda("GpuDataset::make_batch");
}
std::vector<int32_t> GpuDataset::batch_labels(int64_t b) const { no_cuda("GpuDataset::batch_labels"); }
int64_t GpuDataset::batches_per_epoch() const { no_cuda("GpuDataset::batches_per_epoch"); }
Shape GpuDataset::output_shape() const { no_cuda("GpuDataset::output_shape"); }
int GpuDataset::crops() const { no_cuda("GpuDataset::crops"); }
int64_t GpuDataset::epoch() const { no_cuda("GpuDataset::epoch"); }

}  // namespace cnn
