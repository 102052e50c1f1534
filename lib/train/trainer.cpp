// The training loop (see trainer.h). One TrainSession holds everything of one run; the loop
// itself is run_epochs(); set-up, resume and checkpoint policy are split into helpers. With a
// communicator every rank runs the same loop over its share of each global batch (dist_step);
// rank 0 alone evaluates, logs, and writes the run directory.
#include "train/trainer.h"
#include "train/train_session.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <sstream>
#include <thread>

#include "checkpoint/checksum.h"
#include "core/cuda_context.h"
#include "core/error.h"
#include "dist/bucket_math.h"
#include "dist/communicator.h"
#include "dist/gpu_info.h"
#include "dist/grad_reducer.h"
#include "dist/watchdog.h"
#include "dist/world_math.h"
#include "data/dataset.h"
#include "data/gpu_dataset.h"
#include "data/loader.h"
#include "data/normalize.h"
#include "graph/executor.h"
#include "graph/graph.h"
#include "graph/summary.h"
#include "optim/clip.h"
#include "optim/schedule.h"
#include "checkpoint/checkpoint_state.h"
#include "checkpoint/config_diff.h"
#include "model/device_setup.h"
#include "eval/evaluate.h"
#include "model/loss.h"
#include "train/progress.h"
#include "train/run_dir.h"
#include "train/run_summary.h"
#include "train/signals.h"
#include "model/train_step.h"

namespace cnn {

namespace fs = std::filesystem;

// Test hook for the end-to-end tests: CNN_TEST_STOP_AT_STEP=k raises SIGTERM (or the signal in
// CNN_TEST_STOP_SIGNAL: TERM, INT, 15 or 2) right after optimizer step k, through the installed
// handler, so a "stopped by a signal mid-epoch" run is reproducible to the step. Not for users.
void TrainSession::read_test_hook() {
  const char* at = std::getenv("CNN_TEST_STOP_AT_STEP");
  if (!at || !*at) return;
  try {
    m_test_stop_step = std::stoll(at);
  } catch (const std::exception&) {
    CNN_THROW("CNN_TEST_STOP_AT_STEP is '{}', expected a step number", at);
  }
  std::string sig = std::getenv("CNN_TEST_STOP_SIGNAL") ? std::getenv("CNN_TEST_STOP_SIGNAL") : "TERM";
  if (sig == "TERM" || sig == "15")
    m_test_stop_signal = SIGTERM;
  else if (sig == "INT" || sig == "2")
    m_test_stop_signal = SIGINT;
  else
    CNN_THROW("CNN_TEST_STOP_SIGNAL is '{}', expected TERM or INT", sig);
  if (const char* r = std::getenv("CNN_TEST_STOP_RANK"); r && *r) m_test_stop_rank = std::atoi(r);
  if (m_test_stop_rank < 0 || m_test_stop_rank == m_rank)
    spdlog::warn("test hook: raising signal {} after step {}", m_test_stop_signal, m_test_stop_step);
}

void TrainSession::setup_data() {
  // Synthetic data has as many classes as the network's final layer when the model names none.
  const bool synthetic_from_graph = m_spec.classes.empty() && m_spec.data.format == "synthetic";
  m_data = load_dataset(m_spec.data, m_spec.input, synthetic_from_graph ? m_model->graph().class_names() : m_spec.classes);
  for (const auto& note : m_data.notes) spdlog::info("data: {}", note);
  if (m_data.bad_skipped) spdlog::warn("data: {} bad rows/files skipped (data.on_bad_row: skip)", m_data.bad_skipped);
  spdlog::info("class histogram:\n{}", class_histogram_table(m_data));
  if (m_data.train.size() == 0) CNN_THROW("the training split of '{}' is empty", m_spec.data.path);
  if (m_spec.classes.empty() && !m_data.class_names.empty()) {
    // Class names found by the data (image-folder folders): use them and record them in config.yaml.
    m_model->graph().set_class_names(m_data.class_names);
    set_classes(m_spec, m_data.class_names);
  }
  m_norm = resolve_normalization(m_spec.data.normalize, m_data.train);
  spdlog::info("normalisation: {}{}", m_norm.to_string(), m_spec.data.normalize.automatic ? " (auto, from train)" : "");
}

// The device was resolved before anything was read (check_before_touching_anything); a rank takes
// its local GPU (local rank modulo the visible GPUs) or a fair share of the host's cores.
void TrainSession::setup_device() {
  int gpu = 0, threads = 0;
  if (m_comm && m_device == Device::cuda) {
    gpu = local_gpu_index(m_comm->local_rank());
    const int gpus = cuda_device_count();
    if (m_comm->local_size() > gpus)
      spdlog::warn("{} ranks on host {} share {} GPU(s)", m_comm->local_size(), m_comm->host(), gpus);
  } else if (m_comm && !std::getenv("OMP_NUM_THREADS")) {
    // OMP_NUM_THREADS wins; else the host's cores are split between its ranks.
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    threads = std::max(1, int(cores) / std::max(1, m_comm->local_size()));
  }
  m_model->place(m_device, m_spec.train.deterministic, gpu, threads);
}

void TrainSession::setup_model() {
  setup_device();
  m_setup_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - m_t0).count();
  const TrainSpec& t = m_spec.train;
  AutotuneOptions tune = AutotuneOptions::from_spec(t.autotune);
  if (m_comm) {  // rank 0 decides for the job; the others take its plans instead of timing their own
    tune.tune = m_rank == 0;
    tune.share = [this](const std::string& mine) { return m_comm->allgather(mine).at(0); };
  }
  m_model->autotune(t.batch_size, tune);
  const int crops = m_spec.eval.ten_crop ? 10 : 1;
  const int64_t eval_batch = std::max<int64_t>(1, m_spec.eval.batch_size / crops);
  m_model->build_executor(std::max(t.batch_size, eval_batch * crops));
  spdlog::info("model '{}': {} parameters, {:.1f} MFLOPs per training image, predicted memory at batch {}: {}",
               m_spec.name, m_model->graph().trainable_count(), m_model->graph().training_flops() / 1e6, t.batch_size,
               format_bytes(double(estimate_training_memory(m_model->graph(), m_spec, t.batch_size).total())));

  LoaderOptions lo;
  lo.batch_size = t.batch_size;
  lo.mode = LoaderMode::train;
  lo.seed = t.seed;
  lo.drop_last = m_spec.data.drop_last;
  lo.workers = m_spec.data.workers;
  lo.prefetch = m_spec.data.prefetch;
  lo.rank = m_rank;
  lo.world_size = m_world;
  m_train_loader = std::make_unique<Loader>(m_data.train, lo, m_norm, m_spec.data.augment);
  if (m_train_loader->output_shape() != m_model->graph().input_shape())
    CNN_THROW("the loader makes {} images but the network expects {}", m_train_loader->output_shape().to_string(),
              m_model->graph().input_shape().to_string());
  setup_gpu_resident(lo);
  if (m_data.val.size() > 0 && m_rank == 0) {  // rank 0 evaluates the whole split
    LoaderOptions vo = lo;
    vo.rank = 0;
    vo.world_size = 1;
    vo.mode = LoaderMode::eval;
    vo.batch_size = eval_batch;
    vo.ten_crop = m_spec.eval.ten_crop;
    vo.drop_last = false;
    m_val_loader = std::make_unique<Loader>(m_data.val, vo, m_norm, m_spec.data.augment);
  }
  m_model->build_optimizer(t.optimizer);
  m_schedule = std::make_unique<LrSchedule>(t, m_world, m_train_loader->batches_per_epoch());
  m_model->build_loss(m_spec.loss, m_data.train);
  m_model->build_step(t.clip_grad_norm);
  if (!t.cuda_graph) m_model->step().set_cuda_graph(false, "train.cuda_graph is false (--no-cuda-graph)");
  if (!m_comm) spdlog::info("CUDA graph: {}", m_model->step().cuda_graph_status());  // else setup_data_parallel
  spdlog::info("loss: {}; {} steps per epoch", m_model->loss().describe(), m_train_loader->batches_per_epoch());
  std::istringstream lines(describe_optimization(m_spec, m_schedule->base_lr()));
  for (std::string line; std::getline(lines, line);) spdlog::info("{}", line);
  if (m_comm) setup_data_parallel();
}

std::unique_ptr<Loader> TrainSession::make_test_loader() const {
  LoaderOptions to;
  to.mode = LoaderMode::eval;
  to.batch_size = std::max<int64_t>(1, m_spec.eval.batch_size / (m_spec.eval.ten_crop ? 10 : 1));
  to.ten_crop = m_spec.eval.ten_crop;
  to.workers = m_spec.data.workers;
  return std::make_unique<Loader>(m_data.test, to, m_norm, m_spec.data.augment);
}

void TrainSession::end_of_epoch(int64_t epoch, double train_loss, double train_acc, int64_t images, double seconds) {
  nlohmann::json line{{"event", "epoch"},
                      {"epoch", epoch + 1},
                      {"step", m_step},
                      {"train_loss", train_loss},
                      {"train_acc", train_acc},
                      {"lr", m_schedule->lr_at(epoch, m_train_loader->batches_per_epoch() - 1)},  // its last step's
                      {"img_per_s", seconds > 0 ? double(images) / seconds : 0.0}};
  if (m_reduce_comm && m_dist_steps_in_epoch > 0) {
    // Rank 0's wait for gradient means after its backward ended, per step (exposed communication).
    line["allreduce_exposed_ms"] = m_reduce_comm->take_exposed_ms() / double(m_dist_steps_in_epoch);
    m_dist_steps_in_epoch = 0;
  }
  std::string val_text;
  if (m_comm && m_model->graph().buffers_size() > 0) {
    // Each rank's batchnorm statistics saw only its own samples: evaluate and save their mean.
    phase(Phase::allreduce);
    m_reduce_comm->mean_async(m_model->executor().buffers().data(), m_model->graph().buffers_size(), ctx().device, Compression::none);
    m_reduce_comm->wait_means();
  }
  if (m_data.val.size() > 0) {
    EvalReport r;
    if (m_val_loader) {
      phase(Phase::evaluate);
      r = evaluate(m_model->executor(), *m_val_loader, m_model->graph().class_names(), "val", m_spec.loss.label_smoothing);
    }
    if (m_comm) {  // rank 0's numbers drive every rank's schedule, checkpoint and stopping choices
      phase(Phase::allreduce);
      double v[3] = {r.loss, r.top1, r.macro_f1};
      m_comm->broadcast_bytes(v, sizeof v, 0);
      r.loss = v[0], r.top1 = v[1], r.macro_f1 = v[2];
    }
    line["val_loss"] = r.loss;
    line["val_acc"] = r.top1;
    line["val_macro_f1"] = r.macro_f1;
    val_text = fmt::format(", val loss {:.4f}, val acc {:.2f}%, val macro-F1 {:.4f}", r.loss, 100 * r.top1, r.macro_f1);
    auto value_of = [&r](const std::string& metric) {
      return metric == "val_loss" ? r.loss : metric == "val_acc" ? r.top1 : r.macro_f1;
    };
    const std::string& best_by = m_spec.train.checkpoint.best_metric;
    const double metric = value_of(best_by);
    if (!m_has_best || (best_by == "val_loss" ? metric < m_best : metric > m_best)) {
      m_has_best = true;
      m_best = metric;
      line["best"] = true;
    }
    if (m_early.enabled()) {
      m_early.update(epoch + 1, value_of(m_spec.train.early_stopping.metric));
      line["early_stopping"] = m_early.state();
    }
    m_schedule->on_epoch_end(epoch, m_spec.train.schedule.monitor == "val_acc" ? r.top1 : r.loss);
  } else {
    line["val_loss"] = nullptr;
    line["val_acc"] = nullptr;
    line["val_macro_f1"] = nullptr;
    if (m_spec.train.schedule.type == "plateau") m_schedule->on_epoch_end(epoch, train_loss);
  }
  if (m_spec.eval.test_every_epoch && m_rank == 0 && m_data.test.size() > 0) {
    // For time-to-accuracy figures: reported in the epoch line, never used for any choice.
    if (!m_test_loader) m_test_loader = make_test_loader();
    phase(Phase::evaluate);
    EvalReport t = evaluate(m_model->executor(), *m_test_loader, m_model->graph().class_names(), "test", m_spec.loss.label_smoothing);
    line["test_loss"] = t.loss;
    line["test_acc"] = t.top1;
    val_text += fmt::format(", test acc {:.2f}%", 100 * t.top1);
    m_epoch_test = std::make_pair(m_step, std::move(t));
  }
  line["elapsed_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - m_t0).count();
  m_last_metrics = line;
  m_run->append_metrics(line);
  spdlog::info("epoch {}/{}: train loss {:.4f}, train acc {:.2f}%{}, {:.0f} img/s, {:.1f} s", epoch + 1,
               m_spec.train.epochs, train_loss, 100 * train_acc, val_text, line["img_per_s"].get<double>(), seconds);
  save("last", epoch + 1, 0);
  if (line.value("best", false) || m_data.val.size() == 0) save("best", epoch + 1, 0);
  int64_t every = m_spec.train.checkpoint.every_epochs;
  if (every > 0 && (epoch + 1) % every == 0) {
    save(fmt::format("epoch-{:04d}", epoch + 1), epoch + 1, 0);
    prune_epoch_checkpoints();
  }
}

// data.gpu_resident: on = required (an error on the CPU), auto = when the device is a GPU and the
// uint8 training images fit in half the free memory, off = never.
void TrainSession::setup_gpu_resident(const LoaderOptions& lo) {
  const std::string& mode = m_spec.data.gpu_resident;
  if (mode == "off") return;
  if (ctx().device != Device::cuda) {
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
  m_gpu_data = std::make_unique<GpuDataset>(m_data.train, lo, m_norm, m_spec.data.augment, ctx());
  spdlog::info("data: training images resident on the GPU ({:.1f} MiB); batches are built by CUDA kernels",
               GpuDataset::resident_bytes(m_data.train) / 1048576.0);
}

bool TrainSession::next_batch(Batch& b, int64_t epoch) {
  if (!m_gpu_data) return m_train_loader->next(b);
  if (m_gpu_next >= m_gpu_data->batches_per_epoch()) return false;
  b.epoch = epoch;
  b.index = m_gpu_next++;
  b.labels = m_gpu_data->batch_labels(b.index);
  b.images = Tensor();
  b.crops = 1;
  return true;
}

void TrainSession::load_input(const Batch& b) {
  if (!m_gpu_data) {
    load_batch_input(m_model->executor(), b);
    return;
  }
  int64_t n = 0;
  m_gpu_data->make_batch(b.index, m_model->executor().input().data(), nullptr, n);
  CNN_CHECK(n == b.size(), "GPU-resident batch {} has {} samples, expected {}", b.index, n, b.size());
}

StepStats TrainSession::plain_step(const Batch& b, double lr, int64_t epoch) {
  const int64_t n = b.size();
  load_input(b);
  TrainStep::Result r = m_model->step().run(b.labels.data(), n, lr, uint64_t(m_step), m_spec.train.seed);
  if (!std::isfinite(r.loss)) diverged(b, epoch, r.loss, "");
  return {r.loss * double(n), double(r.correct), n, 0};
}

void TrainSession::diverged(const Batch& b, int64_t epoch, double loss, const std::string& ranks) {
  std::string where = "another rank's batch (see its message)";
  if (b.size() > 0 && !std::isfinite(loss)) {
    load_input(b);
    int bad = m_model->executor().forward_find_nonfinite(b.size(), true, uint64_t(m_step), m_spec.train.seed);
    where = bad == -2 ? "the input batch"
            : bad >= 0
                ? fmt::format("layer '{}' ({})", m_model->graph().node(bad).layer->name(), m_model->graph().node(bad).layer->type())
                : "the loss (all layer outputs are finite)";
  }
  CNN_THROW(
      "training diverged at step {} (epoch {}, batch {}){}: the loss is {}; the first non-finite output is in {}. "
      "Try a lower train.optimizer.lr or train.clip_grad_norm.",
      m_step + 1, epoch + 1, b.index + 1, ranks.empty() ? "" : " on rank(s) " + ranks, loss, where);
}

bool TrainSession::run_epochs() {
  const TrainSpec& t = m_spec.train;
  Progress progress(stderr_is_terminal(), m_opt.quiet || m_rank != 0, t.log_every);
  if (m_run->enabled())  // progress lines reach train.log even when the console shows a bar or nothing
    progress.set_file_log([run = m_run.get()](const std::string& line) { run->log_to_file(spdlog::level::info, line); });
  Batch b;
  // One start line per segment (a fresh run or a resume). setup_s is where training begins on
  // elapsed_s's clock: data loaded, device ready; autotuning and the first steps' warm-up count as
  // training (time-to-accuracy figures start here).
  m_start_step = m_step;
  m_run->append_metrics(nlohmann::json{
      {"event", "start"},
      {"step", m_step},
      {"epoch", m_epoch + 1},
      {"next_batch", m_next_batch},
      {"resumed_from", m_resume ? nlohmann::json(m_resume->path) : nlohmann::json(nullptr)},
      {"epochs", t.epochs},
      {"max_steps", t.max_steps},
      {"world_size", m_world},
      {"setup_s", m_setup_s},
      {"elapsed_s", std::chrono::duration<double>(std::chrono::steady_clock::now() - m_t0).count()},
      {"pid", int64_t(::getpid())}});
  m_started = true;
  for (int64_t epoch = m_epoch; epoch < t.epochs; ++epoch) {
    int64_t first = epoch == m_epoch ? m_next_batch : 0;
    if (m_gpu_data) {
      m_gpu_data->start_epoch(epoch);
      m_gpu_next = first;
    } else {
      m_train_loader->start_epoch(epoch, first);
    }
    progress.start_epoch(epoch, t.epochs, m_train_loader->batches_per_epoch(), first);
    if (first == 0) m_loss_sum = m_correct = 0, m_seen = 0;
    double& loss_sum = m_loss_sum;
    double& correct = m_correct;
    int64_t& seen = m_seen;
    for (;;) {
      if (m_watch) m_watch->set(Phase::data, m_step + 1);
      if (!next_batch(b, epoch)) break;
      if (!m_comm && b.size() == 0) continue;
      // The step's learning rate, computed once: the schedule counts steps of this run's epoch
      // length (a resumed run may have another) from the base scaled for the world size.
      const double lr = m_schedule->lr_at(epoch, b.index);
      StepStats st;
      try {
        st = m_comm ? dist_step(b, lr, epoch) : plain_step(b, lr, epoch);
      } catch (...) {
        progress.finish();
        throw;
      }
      ++m_step;
      if (!m_comm && m_step == m_test_stop_step) std::raise(m_test_stop_signal);
      correct += st.correct;
      loss_sum += st.loss_sum;
      seen += st.n;
      progress.update(b.index, st.n, loss_sum / double(std::max<int64_t>(seen, 1)),
                      correct / double(std::max<int64_t>(seen, 1)), lr);
      bool max_reached = t.max_steps > 0 && m_step >= t.max_steps;
      if (int sig = m_comm ? st.stop_signal : stop_requested(); sig || max_reached) {
        progress.finish();
        save("last", epoch, b.index + 1);
        if (sig) {
          m_result.exit_code = 128 + sig;
          if (m_run->enabled()) {
            spdlog::warn("stopped by signal {} after step {}; checkpoint written to '{}'", sig, m_step,
                         m_result.last_checkpoint);
            spdlog::warn("resume with: cnn-train --resume {}", m_run->path());
          }
          m_end_reason = "signal";
          append_end("signal", {{"signal", sig}});
          return false;
        }
        spdlog::info("train.max_steps = {} reached (epoch {}, batch {})", t.max_steps, epoch + 1, b.index + 1);
        if (m_run->enabled())
          spdlog::info("resume with: cnn-train --resume {} (trains on to epoch {}; --max-steps N sets a new limit)",
                       m_run->path(), t.epochs);
        m_end_reason = "max_steps";
        return true;
      }
    }
    progress.finish();
    end_of_epoch(epoch, seen ? loss_sum / double(seen) : 0.0, seen ? correct / double(seen) : 0.0, seen,
                 progress.epoch_seconds());
    if (m_early.should_stop() && epoch + 1 < t.epochs) {
      spdlog::info("early stopping after epoch {}: {}", epoch + 1, m_early.reason());
      m_end_reason = "early_stopping";
      return true;
    }
  }
  m_end_reason = "finished";
  return true;
}

}  // namespace cnn
