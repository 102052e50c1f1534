// The training loop (see trainer.h): set-up of the data, the device and the model stack, the loop
// itself (run_epochs) and the end of each epoch. With a communicator every rank runs the same loop
// over its share of each global batch (DistContext::step); rank 0 alone evaluates, logs, and
// writes the run directory.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <sstream>
#include <thread>

#include "checkpoint/config_diff.h"
#include "core/error.h"
#include "core/process_clock.h"
#include "data/gzip.h"
#include "dist/gpu_info.h"
#include "eval/evaluate.h"
#include "graph/summary.h"
#include "train/progress.h"
#include "train/run_summary.h"
#include "train/signals.h"
#include "train/train_session.h"

namespace cnn {

void TrainSession::start_data() {
  if (m_data.start_load(m_model->graph().class_names()))
    m_startup.set_fact("data", fmt::format("read on its own thread beside the device set-up (data.format {}; "
                                           "gzip inflated by {})",
                                           m_spec.data.format, gzip_inflater()));
}

void TrainSession::setup_data() {
  m_data.load(m_model->graph().class_names());
  startup_mark("data load and decode");
  m_startup.absent("waiting for the data", fmt::format("read before the device set-up: data.format {} logs and "
                                                       "redirects stderr while it reads", m_spec.data.format));
  after_data();
}

void TrainSession::finish_data() {
  if (!m_data.loading()) return;
  m_data.finish_load();
  startup_data_marks();
  // Data and device are ready when the later of the two is (elapsed_s's clock).
  m_setup_s = std::max(m_setup_s, seconds_since_start() - (process_seconds() - m_data.load_end_s()));
  after_data();
}

void TrainSession::after_data() {
  const DataSplits& d = m_data.splits();
  if (m_spec.classes.empty() && !d.class_names.empty()) {
    // Class names found by the data (image-folder folders): use them and record them in config.yaml.
    m_model->graph().set_class_names(d.class_names);
    set_classes(m_spec, d.class_names);
  }
  if (m_resume) check_resume_compatible(m_resume->meta.config_yaml, m_spec, ResumeCheck::after_data);
  if (m_early.enabled() && m_data.splits().val.size() == 0)
    throw ConfigError({m_spec.file}, "train.early_stopping.patience",
                      "early stopping watches a val metric, but the data has no val split (set data.val_split > 0, "
                      "or patience 0)");
}

// The device was resolved before anything was read (check_before_touching_anything); a rank takes
// its local GPU (local rank modulo the visible GPUs) or a fair share of the host's cores.
void TrainSession::setup_device() {
  int gpu = 0, threads = 0;
  if (m_dist && m_device == Device::cuda) {
    Communicator& comm = m_dist->comm();
    gpu = local_gpu_index(comm.local_rank());
    const int gpus = cuda_device_count();
    if (comm.local_size() > gpus) spdlog::warn("{} ranks on host {} share {} GPU(s)", comm.local_size(), comm.host(), gpus);
  } else if (m_dist && !std::getenv("OMP_NUM_THREADS")) {
    // OMP_NUM_THREADS wins; else the host's cores are split between its ranks.
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    threads = std::max(1, int(cores) / std::max(1, m_dist->comm().local_size()));
  }
  m_model->place(m_device, m_spec.train.deterministic, gpu, threads);
}

// The device, autotuning (shapes only) and the memory plan need no data: they run while the data
// thread reads, and the data is joined before the loaders. An error of theirs yields to one of the
// data's, which a reading before them would have met first.
void TrainSession::setup_model() {
  const TrainSpec& t = m_spec.train;
  try {
    setup_device();
    startup_device_mark();
    m_setup_s = seconds_since_start();
    AutotuneOptions tune = AutotuneOptions::from_spec(t.autotune);
    if (m_dist) m_dist->share_autotune(tune);
    startup_autotune_mark(m_model->autotune(t.batch_size, tune));
    const int crops = m_spec.eval.ten_crop ? 10 : 1;
    const int64_t eval_batch = std::max<int64_t>(1, m_spec.eval.batch_size / crops);
    m_model->build_executor(std::max(t.batch_size, eval_batch * crops));
    startup_mark("memory plan and allocation");
    // A fresh run's initial weights need only the seed: made here, while the data may still be read.
    if (m_resume) {
      m_startup.absent("weight initialisation", "resumed: the checkpoint's weights load after the set-up");
    } else {
      m_model->executor().init_params(t.seed);
      startup_mark("weight initialisation");
    }
  } catch (...) {
    finish_data();  // throws the data's error, if it has one
    throw;
  }
  finish_data();
  spdlog::info("model '{}': {} parameters, {:.1f} MFLOPs per training image, predicted memory at batch {}: {}",
               m_spec.name, m_model->graph().trainable_count(), m_model->graph().training_flops() / 1e6, t.batch_size,
               format_bytes(double(estimate_training_memory(m_model->graph(), m_spec, t.batch_size).total())));
  if (!m_model->executor().weight_packs().empty())
    spdlog::info("weight packs: {}", m_model->executor().weight_packs().describe());
  m_data.build_loaders(rank(), world(), ctx(), m_model->graph().input_shape());
  startup_loaders_mark();
  m_model->build_optimizer(t.optimizer);
  m_schedule = std::make_unique<LrSchedule>(t, world(), m_data.batches_per_epoch());
  m_model->build_loss(m_spec.loss, m_data.splits().train);
  m_model->build_step(t.clip_grad_norm, loss_scale_for(t));
  if (!t.cuda_graph) m_model->step().set_cuda_graph(false, "train.cuda_graph is false (--no-cuda-graph)");
  if (!m_dist) spdlog::info("CUDA graph: {}", m_model->step().cuda_graph_status());  // else DistContext::setup
  spdlog::info("loss: {}; {} steps per epoch", m_model->loss().describe(), m_data.batches_per_epoch());
  if (const LossScaler* scaler = m_model->loss_scaler())
    spdlog::info("loss scale (fp16): dynamic, starting at {}, halved on an overflow (the step skipped), doubled "
                 "after {} clean steps",
                 scaler->last().scale, scaler->growth_interval());
  std::istringstream lines(describe_optimization(m_spec, m_schedule->base_lr()));
  for (std::string line; std::getline(lines, line);) spdlog::info("{}", line);
  startup_mark("optimizer, loss, step, logs");
  if (!m_dist) {
    m_startup.absent("NCCL and reducers", "plain process");
    return;
  }
  m_dist->setup(*m_model, m_data, m_schedule->base_lr());
  startup_mark("NCCL and reducers");
}

void TrainSession::end_of_epoch(int64_t epoch, double train_loss, double train_acc, int64_t images, double seconds) {
  nlohmann::json line{{"event", "epoch"},
                      {"epoch", epoch + 1},
                      {"step", m_step},
                      {"train_loss", train_loss},
                      {"train_acc", train_acc},
                      {"lr", m_schedule->lr_at(epoch, m_data.batches_per_epoch() - 1)},  // its last step's
                      {"img_per_s", seconds > 0 ? double(images) / seconds : 0.0}};
  if (m_dist)
    if (std::optional<double> ms = m_dist->take_exposed_ms()) line["allreduce_exposed_ms"] = *ms;
  if (const LossScaler* scaler = m_model->loss_scaler()) {
    line["loss_scale"] = scaler->last().scale;
    line["skipped_steps"] = scaler->last().skipped_steps;
  }
  std::string val_text;
  if (m_dist) m_dist->average_buffers(*m_model);  // evaluate and save the ranks' mean statistics
  const double eval_start = seconds_since_start();
  const bool has_val = m_data.splits().val.size() > 0;
  bool best = !has_val;  // without a val split every epoch's checkpoint is the best one
  if (has_val) {
    EvalReport r;
    if (Loader* val = m_data.val_loader()) {
      phase(Phase::evaluate);
      r = evaluate(m_model->executor(), *val, m_model->graph().class_names(), "val", m_spec.loss.label_smoothing);
    }
    if (m_dist) {  // rank 0's numbers drive every rank's schedule, checkpoint and stopping choices
      double v[3] = {r.loss, r.top1, r.macro_f1};
      m_dist->broadcast_from_rank0(v, 3);
      r.loss = v[0], r.top1 = v[1], r.macro_f1 = v[2];
    }
    line["val_loss"] = r.loss;
    line["val_acc"] = r.top1;
    line["val_macro_f1"] = r.macro_f1;
    val_text = fmt::format(", val loss {:.4f}, val acc {:.2f}%, val macro-F1 {:.4f}", r.loss, 100 * r.top1, r.macro_f1);
    auto value_of = [&r](const std::string& metric) {
      return metric == "val_loss" ? r.loss : metric == "val_acc" ? r.top1 : r.macro_f1;
    };
    if (m_ckpt->improves(value_of(m_ckpt->best_metric()))) best = true, line["best"] = true;
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
  if (m_spec.eval.test_every_epoch && rank() == 0 && m_data.splits().test.size() > 0) {
    // For time-to-accuracy figures: reported in the epoch line, never used for any choice.
    phase(Phase::evaluate);
    EvalReport t = evaluate(m_model->executor(), m_data.test_loader(), m_model->graph().class_names(), "test",
                            m_spec.loss.label_smoothing);
    line["test_loss"] = t.loss;
    line["test_acc"] = t.top1;
    val_text += fmt::format(", test acc {:.2f}%", 100 * t.top1);
    m_epoch_test = std::make_pair(m_step, std::move(t));
  }
  line["elapsed_s"] = seconds_since_start();
  line["process_s"] = process_seconds();  // from the OS's process start: time-to-accuracy figures
  m_epoch_eval_s = line["elapsed_s"].get<double>() - eval_start;
  m_last_metrics = line;
  m_run->append_metrics(line);
  spdlog::info("epoch {}/{}: train loss {:.4f}, train acc {:.2f}%{}, {:.0f} img/s, {:.1f} s", epoch + 1,
               m_spec.train.epochs, train_loss, 100 * train_acc, val_text, line["img_per_s"].get<double>(), seconds);
  const double ckpt_start = seconds_since_start();
  for (const std::string& name : m_ckpt->after_epoch(epoch, best)) save(name, epoch + 1, 0);
  m_epoch_checkpoint_s = seconds_since_start() - ckpt_start;
}

StepStats TrainSession::plain_step(const Batch& b, double lr, int64_t epoch) {
  const int64_t n = b.size();
  m_data.load_input(m_model->executor(), b);
  TrainStep::Result r = m_model->step().run(b.labels.data(), n, lr, uint64_t(m_step), m_spec.train.seed);
  if (!std::isfinite(r.loss)) diverged(b, epoch, r.loss, "");
  return {r.loss * double(n), double(r.correct), n, 0};
}

StepStats TrainSession::dist_step(const Batch& b, double lr, int64_t epoch) {
  return m_dist->step(*m_model, m_data, b, lr, m_step,
                      [&](double loss, const std::string& ranks) { diverged(b, epoch, loss, ranks); });
}

// fp16: the step just taken (m_step) was skipped when the loss scaler found its gradients non-finite.
void TrainSession::report_skipped_step() const {
  const LossScaler* scaler = m_model->loss_scaler();
  if (!scaler || !scaler->last().found_inf || rank() != 0) return;
  spdlog::warn("step {}: the fp16 gradients overflowed (inf or NaN): step skipped, loss scale halved to {} "
               "({} skipped so far)",
               m_step, scaler->last().scale, scaler->last().skipped_steps);
}

void TrainSession::diverged(const Batch& b, int64_t epoch, double loss, const std::string& ranks) {
  std::string where = "another rank's batch (see its message)";
  if (b.size() > 0 && !std::isfinite(loss)) {
    m_data.load_input(m_model->executor(), b);
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
  Progress progress(stderr_is_terminal(), m_opt.quiet || rank() != 0, t.log_every);
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
      {"world_size", world()},
      {"setup_s", m_setup_s},
      {"elapsed_s", seconds_since_start()},
      {"pid", int64_t(::getpid())}});
  m_started = true;
  startup_mark("config.yaml, weights, start line");
  for (int64_t epoch = m_epoch; epoch < t.epochs; ++epoch) {
    int64_t first = epoch == m_epoch ? m_next_batch : 0;
    const double epoch_start = process_seconds();
    const int64_t epoch_first_step = m_step;
    m_data.start_epoch(epoch, first);
    progress.start_epoch(epoch, t.epochs, m_data.batches_per_epoch(), first);
    if (first == 0) m_loss_sum = m_correct = 0, m_seen = 0;
    for (;;) {
      if (m_dist) m_dist->at(Phase::data, m_step + 1);
      if (!m_data.next_batch(b, epoch)) break;
      if (!m_dist && b.size() == 0) continue;
      // The step's learning rate, computed once: the schedule counts steps of this run's epoch
      // length (a resumed run may have another) from the base scaled for the world size.
      const double lr = m_schedule->lr_at(epoch, b.index);
      StepStats st;
      if (!m_startup.steady()) startup_before_step();
      try {
        st = m_dist ? dist_step(b, lr, epoch) : plain_step(b, lr, epoch);
      } catch (...) {
        progress.finish();
        throw;
      }
      ++m_step;
      if (!m_startup.steady()) startup_after_step();
      report_skipped_step();
      if (!m_dist && m_opt.test_hooks.stops_after(m_step)) std::raise(m_opt.test_hooks.stop_signal);
      m_correct += st.correct;
      m_loss_sum += st.loss_sum;
      m_seen += st.n;
      progress.update(b.index, st.n, m_loss_sum / double(std::max<int64_t>(m_seen, 1)),
                      m_correct / double(std::max<int64_t>(m_seen, 1)), lr);
      bool max_reached = t.max_steps > 0 && m_step >= t.max_steps;
      if (int sig = m_dist ? st.stop_signal : stop_requested(); sig || max_reached) {
        progress.finish();
        save("last", epoch, b.index + 1);
        if (sig) {
          m_result.exit_code = 128 + sig;
          if (m_run->enabled()) {
            spdlog::warn("stopped by signal {} after step {}; checkpoint written to '{}'", sig, m_step,
                         m_ckpt->last_path());
            spdlog::warn("resume with: cnn-train --resume {}", m_run->path());
          }
          m_end_reason = "signal";
          append_end("signal", {{"signal", sig}, {"startup", startup_report()}});
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
    const double train_s = process_seconds() - epoch_start;
    end_of_epoch(epoch, m_seen ? m_loss_sum / double(m_seen) : 0.0, m_seen ? m_correct / double(m_seen) : 0.0, m_seen,
                 progress.epoch_seconds());
    const double epoch_end = process_seconds();
    m_startup.add_epoch({epoch + 1, m_step - epoch_first_step, train_s, m_epoch_eval_s, m_epoch_checkpoint_s,
                         epoch_end - epoch_start, epoch_end, first == 0});
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
