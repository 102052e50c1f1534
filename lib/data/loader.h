// Batch loader: one global order per epoch, split across data-parallel ranks, batches built by
// background threads and delivered in order. Results are bitwise identical for any number of
// workers, and start_epoch(e, b) continues an epoch exactly where a checkpoint left it.
// Trap: the Dataset is referenced, not copied: it must outlive the Loader.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "config/model_spec.h"
#include "core/tensor.h"
#include "data/augment.h"
#include "data/dataset.h"
#include "data/normalize.h"

namespace cnn {

enum class LoaderMode {
  train,  // shuffled each epoch, augmented
  eval,   // dataset order, centre crop (or ten-crop)
};

struct Batch {
  Tensor images;                // (n * crops, C, h, w) float on the CPU; sample i's crops at [i*crops, (i+1)*crops)
  std::vector<int32_t> labels;  // (n)
  std::vector<int64_t> indices; // (n) dataset indices of the samples
  int64_t epoch = 0, index = 0; // index: the global batch number within the epoch
  int crops = 1;                // 10 for ten-crop evaluation
  int64_t size() const { return static_cast<int64_t>(labels.size()); }
};

struct LoaderOptions {
  int64_t batch_size = 64;   // per rank
  LoaderMode mode = LoaderMode::train;
  bool ten_crop = false;     // eval mode only
  uint64_t seed = 0;         // shuffle and augmentation
  bool drop_last = false;    // drop a last global batch smaller than batch_size * world_size
  int64_t workers = 0;       // background threads; 0 builds batches inside next()
  int64_t prefetch = 2;      // batches in flight or waiting ahead of the consumer (workers beyond it idle)
  int64_t rank = 0, world_size = 1;
  // Runs on the worker thread after a batch is built (mixup, pinning, ...); exceptions reach next().
  std::function<void(Batch&)> on_batch;
};

// Global batch b covers positions [b * G, min((b + 1) * G, N)) of the epoch order, G = batch_size *
// world_size; rank r takes a contiguous share: positions [b*G + r*batch, ...) when the batch is full.
// A last partial batch of m samples is split as evenly as possible (the first m % world ranks get
// one more), so a rank may get 0 samples: it still receives an empty Batch, so every rank runs the
// same number of steps and collectives never hang.
class Loader {
public:
  Loader(const Dataset& data, LoaderOptions options, const Normalization& norm, const AugmentSpec& augment);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Begins (or, with first_batch > 0, resumes) an epoch; drops anything prepared for the previous one.
  void start_epoch(int64_t epoch, int64_t first_batch = 0);
  // The next batch of this rank, in order; false at the end of the epoch. Rethrows a worker's error.
  bool next(Batch& out);

  int64_t batches_per_epoch() const { return m_batches; }
  Shape output_shape() const { return m_aug.sample_shape(); }  // per sample (C, h, w)
  int64_t epoch() const { return m_epoch; }
  int64_t next_batch_index() const { return m_next_deliver; }  // the data cursor to save in checkpoints
  const LoaderOptions& options() const { return m_opt; }
  // Dataset indices in the order of `epoch` (a Philox Fisher-Yates shuffle in train mode).
  std::vector<int64_t> epoch_order(int64_t epoch) const;
  // Positions [begin, end) of the epoch order that global batch b gives this rank.
  std::pair<int64_t, int64_t> rank_range(int64_t b) const;

private:
  struct Slot {
    Batch batch;
    std::exception_ptr error;
  };
  void worker_loop();
  void build(int64_t epoch, int64_t b, const std::vector<int64_t>& order, Batch& out) const;

  const Dataset& m_data;
  LoaderOptions m_opt;
  Augmenter m_aug;
  int64_t m_batches = 0;

  std::mutex m_mutex;
  std::condition_variable m_work_cv, m_ready_cv;
  bool m_stop = false, m_started = false;
  uint64_t m_generation = 0;  // bumped by start_epoch: work of an older generation is discarded
  int64_t m_epoch = 0, m_next_claim = 0, m_next_deliver = 0;
  std::shared_ptr<const std::vector<int64_t>> m_order;
  std::map<int64_t, Slot> m_ready;
  std::vector<std::thread> m_threads;
};

}  // namespace cnn
