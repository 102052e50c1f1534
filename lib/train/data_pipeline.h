// The data of a training run: splits, normalisation, the training batches (host loader, or CUDA
// kernels over GPU-resident images: data.gpu_resident) and the val and test loaders; each rank
// trains on its share of every global batch. The splits may be read on a thread of their own
// (start_load) while the device is set up, and joined (finish_load) before anything uses them.
// Trap: the val loader exists on rank 0 only, the test loader is made on first use, and the spec
// given to the constructor must outlive the pipeline (whose destructor waits for the thread).
#pragma once

#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "config/model_spec.h"
#include "core/exec_context.h"
#include "data/dataset.h"
#include "data/gpu_dataset.h"
#include "data/loader.h"
#include "data/normalize.h"
#include "graph/executor.h"

namespace cnn {

class DataPipeline {
 public:
  explicit DataPipeline(const ModelSpec& spec) : m_spec(spec) {}
  ~DataPipeline();
  DataPipeline(const DataPipeline&) = delete;
  DataPipeline& operator=(const DataPipeline&) = delete;

  // Reads the splits (synthetic data of a model that names no classes takes the network's,
  // `graph_classes`) and resolves the normalisation from the training split; logs the data's notes,
  // the class histogram and the normalisation. An empty training split is an error.
  void load(const std::vector<std::string>& graph_classes);
  // load() in two halves: the reading and the normalisation statistics on a thread of its own,
  // started here, for the formats whose readers neither log nor redirect stderr (idx, fer2013-csv,
  // synthetic: image-folder's image decoders do both, so it returns false and starts nothing).
  bool start_load(const std::vector<std::string>& graph_classes);
  // Waits for that thread, then does the rest of load() on this one: the logs and the checks, in
  // load()'s order, rethrowing the thread's error as it was thrown (same type, same message).
  void finish_load();
  bool loading() const { return m_thread.joinable(); }
  // start_load's thread: when it began and ended its work, seconds since the process start.
  double load_start_s() const { return m_load_start_s; }
  double load_end_s() const { return m_load_end_s; }
  // The training loader of `rank`'s share of every global batch of `world` ranks (checked against
  // the network's per-sample input shape), the GPU-resident training images when data.gpu_resident
  // asks for them on `ctx`'s device, and on rank 0 the val loader (eval batches of
  // eval.batch_size images, ten crops each under eval.ten_crop).
  void build_loaders(int rank, int world, const ExecContext& ctx, const Shape& input_shape);

  const DataSplits& splits() const { return m_data; }
  const Normalization& normalization() const { return m_norm; }
  int64_t batches_per_epoch() const { return m_train->batches_per_epoch(); }

  // From batch `first` of `epoch` on (a resumed run starts mid-epoch).
  void start_epoch(int64_t epoch, int64_t first);
  bool next_batch(Batch& b, int64_t epoch);  // false at the end of the epoch
  // The batch into the executor's input: f32 from the host loader; GPU-resident batches in
  // ex.native_input_dtype() (Executor::set_input_dtype).
  void load_input(Executor& ex, const Batch& b) const;
  Loader* val_loader() { return m_val.get(); }  // null: no val split, or not rank 0
  // Seconds build_loaders spent making the training images GPU-resident (per-image means, the
  // upload); -1 when they stay on the host.
  double gpu_upload_seconds() const { return m_gpu_upload_s; }
  Loader& test_loader();

 private:
  void setup_gpu_resident(const LoaderOptions& lo, const ExecContext& ctx);
  void read_splits(const std::vector<std::string>& graph_classes);  // the part start_load's thread runs
  void report_loaded();  // load()'s logs and checks after read_splits
  int64_t eval_batch() const;  // images per eval batch before ten-crop

  const ModelSpec& m_spec;
  DataSplits m_data;
  Normalization m_norm;
  std::unique_ptr<Loader> m_train, m_val, m_test;
  std::unique_ptr<GpuDataset> m_gpu;  // data.gpu_resident: training batches built on the GPU
  int64_t m_gpu_next = 0;             // next batch of m_gpu in the epoch
  double m_gpu_upload_s = -1;
  std::thread m_thread;                  // start_load's, until finish_load
  std::exception_ptr m_read_error;       // read_splits': reading the data
  std::exception_ptr m_norm_error;       // read_splits': the normalisation (thrown after load()'s logs)
  double m_load_start_s = -1, m_load_end_s = -1;
};

}  // namespace cnn
