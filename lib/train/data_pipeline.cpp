// The data of a training run (see data_pipeline.h).
#include "train/data_pipeline.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "core/process_clock.h"
#include "eval/evaluate.h"
#include "ops/convert.h"

namespace cnn {

DataPipeline::~DataPipeline() {
  if (m_thread.joinable()) m_thread.join();  // an error unwinding set-up: the thread's result is dropped
}

void DataPipeline::load(const std::vector<std::string>& graph_classes) {
  read_splits(graph_classes);
  report_loaded();
}

bool DataPipeline::start_load(const std::vector<std::string>& graph_classes) {
  const std::string& f = m_spec.data.format;
  if (f != "idx" && f != "fer2013-csv" && f != "synthetic") return false;
  m_thread = std::thread([this, graph_classes] {
    m_load_start_s = process_seconds();
    read_splits(graph_classes);
    m_load_end_s = process_seconds();
  });
  return true;
}

void DataPipeline::finish_load() {
  if (!m_thread.joinable()) return;
  m_thread.join();
  report_loaded();
}

// Everything of load() that neither logs nor reads the clock of another thread; its errors are
// kept, to be rethrown by report_loaded where load() met them.
void DataPipeline::read_splits(const std::vector<std::string>& graph_classes) {
  m_read_error = m_norm_error = nullptr;
  try {
    const bool synthetic_from_graph = m_spec.classes.empty() && m_spec.data.format == "synthetic";
    m_data = load_dataset(m_spec.data, m_spec.input, synthetic_from_graph ? graph_classes : m_spec.classes);
  } catch (...) {
    m_read_error = std::current_exception();
    return;
  }
  if (m_data.train.size() == 0) return;  // report_loaded says so, after the notes
  try {
    m_norm = resolve_normalization(m_spec.data.normalize, m_data.train);
  } catch (...) {
    m_norm_error = std::current_exception();
  }
}

void DataPipeline::report_loaded() {
  if (m_read_error) std::rethrow_exception(m_read_error);
  for (const auto& note : m_data.notes) spdlog::info("data: {}", note);
  if (m_data.bad_skipped) spdlog::warn("data: {} bad rows/files skipped (data.on_bad_row: skip)", m_data.bad_skipped);
  spdlog::info("class histogram:\n{}", class_histogram_table(m_data));
  if (m_data.train.size() == 0) CNN_THROW("the training split of '{}' is empty", m_spec.data.path);
  if (m_norm_error) std::rethrow_exception(m_norm_error);
  spdlog::info("normalisation: {}{}", m_norm.to_string(), m_spec.data.normalize.automatic ? " (auto, from train)" : "");
}

int64_t DataPipeline::eval_batch() const {
  return std::max<int64_t>(1, m_spec.eval.batch_size / (m_spec.eval.ten_crop ? 10 : 1));
}

void DataPipeline::build_loaders(int rank, int world, const ExecContext& ctx, const Shape& input_shape) {
  const TrainSpec& t = m_spec.train;
  LoaderOptions lo;
  lo.batch_size = t.batch_size;
  lo.mode = LoaderMode::train;
  lo.seed = t.seed;
  lo.drop_last = m_spec.data.drop_last;
  lo.workers = m_spec.data.workers;
  lo.prefetch = m_spec.data.prefetch;
  lo.rank = rank;
  lo.world_size = world;
  m_train = std::make_unique<Loader>(m_data.train, lo, m_norm, m_spec.data.augment);
  if (m_train->output_shape() != input_shape)
    CNN_THROW("the loader makes {} images but the network expects {}", m_train->output_shape().to_string(),
              input_shape.to_string());
  setup_gpu_resident(lo, ctx);
  if (m_data.val.size() > 0 && rank == 0) {  // rank 0 evaluates the whole split
    LoaderOptions vo = lo;
    vo.rank = 0;
    vo.world_size = 1;
    vo.mode = LoaderMode::eval;
    vo.batch_size = eval_batch();
    vo.ten_crop = m_spec.eval.ten_crop;
    vo.drop_last = false;
    m_val = std::make_unique<Loader>(m_data.val, vo, m_norm, m_spec.data.augment);
  }
}

Loader& DataPipeline::test_loader() {
  if (!m_test) {
    LoaderOptions to;
    to.mode = LoaderMode::eval;
    to.batch_size = eval_batch();
    to.ten_crop = m_spec.eval.ten_crop;
    to.workers = m_spec.data.workers;
    m_test = std::make_unique<Loader>(m_data.test, to, m_norm, m_spec.data.augment);
  }
  return *m_test;
}

// data.gpu_resident: on = required (an error on the CPU), auto = when the device is a GPU and the
// uint8 training images fit in half the free memory, off = never.
void DataPipeline::setup_gpu_resident(const LoaderOptions& lo, const ExecContext& ctx) {
  const std::string& mode = m_spec.data.gpu_resident;
  if (mode == "off") return;
  if (ctx.device != Device::cuda) {
    if (mode == "on")
      throw ConfigError({m_spec.file}, "data.gpu_resident", "'on' needs a GPU run, but the device is the CPU");
    return;
  }
  size_t free_bytes = GpuDataset::device_free_bytes();
  if (mode == "auto" && !GpuDataset::fits(m_data.train, free_bytes)) {
    spdlog::info("data: training images stay on the host ({:.1f} MiB do not fit in half of the {:.1f} MiB free)",
                 GpuDataset::resident_bytes(m_data.train) / 1048576.0, free_bytes / 1048576.0);
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  m_gpu = std::make_unique<GpuDataset>(m_data.train, lo, m_norm, m_spec.data.augment, ctx);
  m_gpu_upload_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  spdlog::info("data: training images resident on the GPU ({:.1f} MiB); batches are built by CUDA kernels",
               GpuDataset::resident_bytes(m_data.train) / 1048576.0);
}

void DataPipeline::start_epoch(int64_t epoch, int64_t first) {
  if (m_gpu) {
    m_gpu->start_epoch(epoch);
    m_gpu_next = first;
  } else {
    m_train->start_epoch(epoch, first);
  }
}

bool DataPipeline::next_batch(Batch& b, int64_t epoch) {
  if (!m_gpu) return m_train->next(b);
  if (m_gpu_next >= m_gpu->batches_per_epoch()) return false;
  b.epoch = epoch;
  b.index = m_gpu_next++;
  b.labels = m_gpu->batch_labels(b.index);
  b.images = Tensor();
  b.crops = 1;
  return true;
}

void DataPipeline::load_input(Executor& ex, const Batch& b) const {
  if (!m_gpu) {
    load_batch_input(ex, b);
    return;
  }
  // In the dtype and layout the first layer reads (bf16/f16 channels-last in a 16-bit run): the
  // graph casts nothing, and the step reads half the bytes.
  ex.set_input_dtype(ex.native_input_dtype());
  const DType t = ex.input_dtype();
  int64_t n = 0;
  m_gpu->make_batch(b.index, ex.input().raw(), BatchFormat{t, activation_layout(t) == Layout::nhwc}, nullptr, n);
  CNN_CHECK(n == b.size(), "GPU-resident batch {} has {} samples, expected {}", b.index, n, b.size());
}

}  // namespace cnn
