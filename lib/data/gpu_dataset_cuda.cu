// GpuDataset (see gpu_dataset.h): one thread per output value gathers its source image through the
// epoch order, samples it with augment_math.h and stores it in the batch's dtype and layout. The
// random draws are made on the host by Augmenter::draw (a few Philox calls per sample) and staged
// as AugmentPlans through a pinned ring.
// Trap: a pinned slot is rewritten only after the event recorded behind its batch's kernel has
// fired; the one device plan buffer needs no such care, as copy and kernel share the stream.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "core/bf16.h"
#include "core/cuda_check.h"
#include "core/fp16.h"
#include "data/augment_math.h"
#include "data/gpu_dataset.h"

namespace cnn {

static constexpr int kThreads = 256;
static constexpr int kStagingSlots = 4;  // batches the host may queue ahead of the GPU

struct GpuBatchShape {
  int64_t C, H, W;  // source images
  int64_t P, Q;     // output crop height and width
  int64_t crops;    // output images per sample (1, or 10 for ten-crop)
};

namespace {

struct DeviceFree {
  void operator()(void* p) const noexcept { device_free(Device::cuda, p); }
};
struct PinnedFree {
  void operator()(void* p) const noexcept {
    if (p) cudaFreeHost(p);
  }
};
using DevicePtr = std::unique_ptr<void, DeviceFree>;
using PinnedPtr = std::unique_ptr<void, PinnedFree>;

DevicePtr device_upload(const void* host, size_t bytes, const std::string& what) {
  DevicePtr p(device_malloc(Device::cuda, bytes, what));
  device_memcpy(p.get(), Device::cuda, host, Device::cpu, bytes);
  return p;
}

PinnedPtr pinned_alloc(size_t bytes) {
  void* p = nullptr;
  if (bytes) CUDA_CHECK(cudaMallocHost(&p, bytes));
  return PinnedPtr(p);
}

LoaderOptions index_options(LoaderOptions o) {
  o.workers = 0;  // the index Loader never builds a batch
  o.on_batch = nullptr;
  return o;
}

// The kernel's inputs (device memory).
struct BatchSources {
  const uint8_t* pixels;     // (N, C, H, W)
  const int32_t* labels;     // (N)
  const float* means;        // (N, C) in 0..1 units
  const float* consts;       // (C, 256) tables, (C) means, (C) stds
  const int64_t* order;      // (N)
  const AugmentPlan* plans;  // (plan_count)
};

}  // namespace

// Output image j shows sample j / crops, that is dataset image order[begin + j / crops], sampled
// with plans[j % plan_count] (plan_count = n in train mode, crops in eval mode). Thread t makes
// element t of the batch in its storage order (NCHW, or channels-last), so stores are coalesced.
template <DType kOut>
static __global__ void batch_augment_per_pixel_kernel(GpuBatchShape sh, int64_t begin, int64_t n, int64_t plan_count,
                                                      BatchSources in, bool channels_last,
                                                      void* images,           // (n * crops, C, P, Q) in kOut
                                                      int32_t* out_labels) {  // (n) or null
  const int64_t pq = sh.P * sh.Q, per = sh.C * pq, total = n * sh.crops * per;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += stride) {
    const int64_t j = t / per, r = t - j * per;
    const int64_t c = channels_last ? r % sh.C : r / pq, yx = channels_last ? r / sh.C : r - c * pq;
    const int64_t oy = yx / sh.Q, ox = yx - oy * sh.Q;
    const int64_t src = in.order[begin + j / sh.crops];
    const AugmentPlan p = in.plans[j % plan_count];
    const uint8_t* plane = in.pixels + (src * sh.C + c) * sh.H * sh.W;
    const float mean = p.use_mean ? in.means[src * sh.C + c] : 0.0f;
    const float v = augment_pixel(p, plane, sh.H, sh.W, sh.Q, oy, ox, in.consts + c * 256, mean,
                                  in.consts[sh.C * 256 + c], in.consts[sh.C * 257 + c]);
    // f32 as computed; bf16 or f16 rounded once to nearest even (the bits of ConvertForward's cast).
    if constexpr (kOut == DType::bf16) static_cast<uint16_t*>(images)[t] = bf16_bits_from_float(v);
    else if constexpr (kOut == DType::f16) static_cast<uint16_t*>(images)[t] = f16_bits_from_float(v);
    else static_cast<float*>(images)[t] = v;
    if (out_labels && t < n) out_labels[t] = in.labels[in.order[begin + t]];
  }
}

static void launch_batch_augment(cudaStream_t stream, const GpuBatchShape& sh, int64_t begin, int64_t n,
                                 int64_t plan_count, const BatchSources& in, const BatchFormat& format, void* images,
                                 int32_t* out_labels) {
  const int64_t total = n * sh.crops * sh.C * sh.P * sh.Q;
  if (total == 0) return;
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>((total + kThreads - 1) / kThreads, int64_t{1} << 20));
  const bool cl = format.channels_last;
  if (format.dtype == DType::bf16)
    batch_augment_per_pixel_kernel<DType::bf16>
        <<<grid, kThreads, 0, stream>>>(sh, begin, n, plan_count, in, cl, images, out_labels);
  else if (format.dtype == DType::f16)
    batch_augment_per_pixel_kernel<DType::f16>
        <<<grid, kThreads, 0, stream>>>(sh, begin, n, plan_count, in, cl, images, out_labels);
  else
    batch_augment_per_pixel_kernel<DType::f32>
        <<<grid, kThreads, 0, stream>>>(sh, begin, n, plan_count, in, cl, images, out_labels);
  CUDA_CHECK_LAUNCH("GPU-resident batch augmentation");
}

struct GpuDataset::State {
  State(const Dataset& d, const LoaderOptions& o, const Normalization& norm, const AugmentSpec& a)
      : data(d), opt(index_options(o)), index(d, opt, norm, a), aug(a, norm, d.channels, d.height, d.width) {}
  ~State() {
    // Nothing may be freed while a queued copy or kernel still uses it; errors are not thrown here.
    for (cudaEvent_t e : slot_done) {
      if (!e) continue;
      cudaEventSynchronize(e);
      cudaEventDestroy(e);
    }
    if (order_done) {
      cudaEventSynchronize(order_done);
      cudaEventDestroy(order_done);
    }
  }

  const Dataset& data;
  LoaderOptions opt;
  Loader index;  // never builds a batch: the one definition of epoch order, rank shares and batch count
  Augmenter aug;
  cudaStream_t stream = nullptr;
  GpuBatchShape shape{};
  int64_t pad = 0;
  DevicePtr pixels, labels, means, consts, order, plans;  // see the kernel's parameters
  PinnedPtr order_staging;                                // (N) int64
  PinnedPtr plan_staging;                                 // (kStagingSlots, batch_size) AugmentPlan
  cudaEvent_t order_done = nullptr;
  cudaEvent_t slot_done[kStagingSlots] = {};
  int next_slot = 0;
  std::vector<int64_t> host_order;
  int64_t epoch = 0;
  bool started = false;
};

GpuDataset::GpuDataset(const Dataset& data, const LoaderOptions& options, const Normalization& norm,
                       const AugmentSpec& augment, const ExecContext& cuda_ctx) {
  CNN_CHECK(cuda_ctx.device == Device::cuda, "GpuDataset needs a cuda execution context, got {}",
            to_string(cuda_ctx.device));
  m_state = std::make_unique<State>(data, options, norm, augment);
  State& s = *m_state;
  const Shape out = s.aug.sample_shape();
  const int crops = s.opt.ten_crop ? 10 : 1;
  s.stream = static_cast<cudaStream_t>(cuda_ctx.cuda_stream);
  s.shape = GpuBatchShape{data.channels, data.height, data.width, out[1], out[2], crops};
  s.pad = augment.crop_padding;
  const int64_t N = data.size(), C = data.channels, hw = data.height * data.width;

  const size_t need = resident_bytes(data), free_b = device_free_bytes();
  if (need > free_b) {
    CNN_THROW(
        "GPU-resident dataset: {} images of {}x{}x{} need {:.1f} MiB on the GPU but only {:.1f} MiB are free "
        "(set data.gpu_resident: off to keep the data on the host)",
        N, C, data.height, data.width, need / 1048576.0, free_b / 1048576.0);
  }
  std::vector<float> means(static_cast<size_t>(N * C));
  for (int64_t i = 0; i < N; ++i) {
    for (int64_t c = 0; c < C; ++c) {
      const uint8_t* plane = data.sample(i) + c * hw;
      uint64_t sum = 0;
      for (int64_t k = 0; k < hw; ++k) sum += plane[k];
      means[static_cast<size_t>(i * C + c)] = augment_channel_mean(sum, hw);
    }
  }
  std::vector<float> consts = normalization_table(norm);
  consts.insert(consts.end(), norm.mean.begin(), norm.mean.end());
  consts.insert(consts.end(), norm.std.begin(), norm.std.end());
  s.pixels = device_upload(data.pixels.data(), data.pixels.size(), "GPU-resident pixels");
  s.labels = device_upload(data.labels.data(), data.labels.size() * sizeof(int32_t), "GPU-resident labels");
  s.means = device_upload(means.data(), means.size() * sizeof(float), "GPU-resident channel means");
  s.consts = device_upload(consts.data(), consts.size() * sizeof(float), "normalisation tables");
  s.order = DevicePtr(device_malloc(Device::cuda, static_cast<size_t>(N) * sizeof(int64_t), "epoch order"));
  s.order_staging = pinned_alloc(static_cast<size_t>(N) * sizeof(int64_t));

  if (s.opt.mode == LoaderMode::train) {
    const size_t slot_bytes = static_cast<size_t>(s.opt.batch_size) * sizeof(AugmentPlan);
    s.plans = DevicePtr(device_malloc(Device::cuda, slot_bytes, "augmentation plans"));
    s.plan_staging = pinned_alloc(slot_bytes * kStagingSlots);
  } else {
    // The evaluation windows of Augmenter::center_crop / ten_crop, fixed for every sample.
    const int64_t H = data.height, W = data.width, P = out[1], Q = out[2];
    std::vector<AugmentPlan> plans;
    if (crops == 1) {
      plans.push_back(make_crop_plan((H - P) / 2, (W - Q) / 2, false));
    } else {
      const int64_t ys[5] = {0, 0, H - P, H - P, (H - P) / 2};
      const int64_t xs[5] = {0, W - Q, 0, W - Q, (W - Q) / 2};
      for (int k = 0; k < 10; ++k) plans.push_back(make_crop_plan(ys[k % 5], xs[k % 5], k >= 5));
    }
    s.plans = device_upload(plans.data(), plans.size() * sizeof(AugmentPlan), "evaluation crops");
  }
  CUDA_CHECK(cudaEventCreateWithFlags(&s.order_done, cudaEventDisableTiming));
  for (cudaEvent_t& e : s.slot_done) CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
}

GpuDataset::~GpuDataset() = default;

size_t GpuDataset::device_free_bytes() {
  if (!cuda_available()) return 0;
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return free_b;
}

void GpuDataset::start_epoch(int64_t epoch) {
  State& s = *m_state;
  CNN_CHECK(epoch >= 0 && epoch < (int64_t{1} << 23), "epoch {} out of range", epoch);
  s.host_order = s.index.epoch_order(epoch);
  const size_t bytes = s.host_order.size() * sizeof(int64_t);
  if (bytes) {
    CUDA_CHECK(cudaEventSynchronize(s.order_done));  // the previous epoch's upload has left the staging buffer
    std::memcpy(s.order_staging.get(), s.host_order.data(), bytes);
    CUDA_CHECK(cudaMemcpyAsync(s.order.get(), s.order_staging.get(), bytes, cudaMemcpyHostToDevice, s.stream));
    CUDA_CHECK(cudaEventRecord(s.order_done, s.stream));
  }
  s.epoch = epoch;
  s.started = true;
}

void GpuDataset::make_batch(int64_t b, void* images, const BatchFormat& format, int32_t* labels, int64_t& n) {
  State& s = *m_state;
  CNN_CHECK(format.dtype == DType::f32 || format.dtype == DType::bf16 || format.dtype == DType::f16,
            "GPU-resident batches are f32, bf16 or f16, not {}", to_string(format.dtype));
  CNN_CHECK(s.started, "GpuDataset::make_batch called before start_epoch");
  CNN_CHECK(b >= 0 && b < s.index.batches_per_epoch(), "batch {} outside [0, {})", b, s.index.batches_per_epoch());
  const auto [begin, end] = s.index.rank_range(b);
  n = end - begin;
  if (n == 0) return;
  const int slot = s.next_slot;
  s.next_slot = (slot + 1) % kStagingSlots;
  CUDA_CHECK(cudaEventSynchronize(s.slot_done[slot]));  // the batch that last used this slot is done
  int64_t plan_count = s.shape.crops;
  if (s.opt.mode == LoaderMode::train) {
    AugmentPlan* staged = static_cast<AugmentPlan*>(s.plan_staging.get()) + slot * s.opt.batch_size;
    for (int64_t i = 0; i < n; ++i) staged[i] = make_augment_plan(s.aug.draw(s.opt.seed, s.epoch, begin + i), s.pad);
    CUDA_CHECK(cudaMemcpyAsync(s.plans.get(), staged, static_cast<size_t>(n) * sizeof(AugmentPlan),
                               cudaMemcpyHostToDevice, s.stream));
    plan_count = n;
  }
  const BatchSources in{static_cast<const uint8_t*>(s.pixels.get()), static_cast<const int32_t*>(s.labels.get()),
                        static_cast<const float*>(s.means.get()),    static_cast<const float*>(s.consts.get()),
                        static_cast<const int64_t*>(s.order.get()),  static_cast<const AugmentPlan*>(s.plans.get())};
  launch_batch_augment(s.stream, s.shape, begin, n, plan_count, in, format, images, labels);
  CUDA_CHECK(cudaEventRecord(s.slot_done[slot], s.stream));
}

std::vector<int32_t> GpuDataset::batch_labels(int64_t b) const {
  const State& s = *m_state;
  CNN_CHECK(s.started, "GpuDataset::batch_labels called before start_epoch");
  CNN_CHECK(b >= 0 && b < s.index.batches_per_epoch(), "batch {} outside [0, {})", b, s.index.batches_per_epoch());
  const auto [begin, end] = s.index.rank_range(b);
  std::vector<int32_t> out;
  for (int64_t pos = begin; pos < end; ++pos)
    out.push_back(s.data.labels[static_cast<size_t>(s.host_order[static_cast<size_t>(pos)])]);
  return out;
}

int64_t GpuDataset::batches_per_epoch() const { return m_state->index.batches_per_epoch(); }
Shape GpuDataset::output_shape() const { return m_state->aug.sample_shape(); }
int GpuDataset::crops() const { return static_cast<int>(m_state->shape.crops); }
int64_t GpuDataset::epoch() const { return m_state->epoch; }

}  // namespace cnn
