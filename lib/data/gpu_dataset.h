// GPU-resident data: the uint8 images and labels are uploaded once; each batch is gathered,
// augmented and normalised by one CUDA kernel on the context's stream, equal to the Loader's batch
// (same order, rank shares and Augmenter draws; the per-pixel math is augment_math.h on both sides),
// or to it rounded once to bf16 or f16, stored channels-last if asked (BatchFormat): the batch a
// 16-bit first layer reads, with no cast between.
// Traps: like the Loader, the Dataset is referenced and must outlive this object; and make_batch
// returns before the batch exists: read it only through work queued later on the same stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "config/model_spec.h"
#include "core/dtype.h"
#include "core/exec_context.h"
#include "core/shape.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/normalize.h"

namespace cnn {

// How make_batch stores a batch: dtype f32, bf16 or f16 (a 16-bit value is the f32 one rounded
// once to nearest even, core/bf16.h and core/fp16.h: the bits a cast of the f32 batch would give),
// in NCHW order (n * crops, C, h, w) or channels-last (n * crops, h, w, C). make_batch throws for
// another dtype.
struct BatchFormat {
  DType dtype = DType::f32;
  bool channels_last = false;
};

class GpuDataset {
 public:
  // Uploads the pixels, labels and per-image channel means to ctx's GPU (ctx.device must be cuda).
  // Throws an Error naming the sizes when the GPU lacks the memory. options.workers, prefetch and
  // on_batch are ignored; mode, ten_crop, batch_size, seed, drop_last, rank, world_size mean what
  // they mean for the Loader.
  GpuDataset(const Dataset& data, const LoaderOptions& options, const Normalization& norm, const AugmentSpec& augment,
             const ExecContext& cuda_ctx);
  ~GpuDataset();
  GpuDataset(const GpuDataset&) = delete;
  GpuDataset& operator=(const GpuDataset&) = delete;

  // Device bytes the dataset occupies: pixels (uint8), labels (int32), channel means (float) and the
  // epoch order (int64) of every sample.
  static size_t resident_bytes(const Dataset& data) {
    const size_t n = static_cast<size_t>(data.size()), c = static_cast<size_t>(data.channels);
    return n * static_cast<size_t>(data.sample_bytes()) + n * (sizeof(int32_t) + c * sizeof(float) + sizeof(int64_t));
  }
  // Whether to keep `data` on the GPU: it takes at most half of free_bytes (the rest stays for the
  // model's activations, the optimizer and the allocator's slack).
  static bool fits(const Dataset& data, size_t free_bytes) { return resident_bytes(data) <= free_bytes / 2; }
  // Free memory of the current GPU (cudaMemGetInfo); 0 without CUDA or a usable GPU. Never throws.
  static size_t device_free_bytes();

  // Uploads the order of `epoch` (Loader::epoch_order: shuffled in train mode, dataset order in eval).
  void start_epoch(int64_t epoch);
  // Queues global batch b of this rank for the current epoch on ctx.cuda_stream, without waiting
  // for the GPU (the host blocks only when more than a few batches are still queued):
  // images (n * crops(), C, h, w) stored as `format` says and, unless null, labels (n), both device
  // memory with room for batch_size * crops() rows. Sets n, which may be 0 (an empty rank share:
  // nothing is queued).
  void make_batch(int64_t b,
                  void* images,  // (n * crops, C, h, w) device, in format
                  const BatchFormat& format,
                  int32_t* labels,  // (n) device, or null
                  int64_t& n);
  // f32 NCHW.
  void make_batch(int64_t b, float* images, int32_t* labels, int64_t& n) {
    make_batch(b, images, BatchFormat{}, labels, n);
  }
  // The labels of batch b on the host, from the host copy of the order (no device transfer).
  std::vector<int32_t> batch_labels(int64_t b) const;

  int64_t batches_per_epoch() const;
  Shape output_shape() const;  // per sample (C, h, w), as Loader::output_shape()
  int crops() const;           // 10 for ten-crop evaluation, else 1
  int64_t epoch() const;

 private:
  struct State;
  std::unique_ptr<State> m_state;
};

}  // namespace cnn
