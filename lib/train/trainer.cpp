// The training loop (see trainer.h). One TrainSession holds everything of one run; the loop
// itself is run_epochs(); set-up, resume and checkpoint policy are split into helpers.
#include "train/trainer.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "core/error.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/normalize.h"
#include "graph/executor.h"
#include "graph/graph.h"
#include "graph/summary.h"
#include "optim/clip.h"
#include "optim/schedule.h"
#include "train/checkpoint_state.h"
#include "train/config_diff.h"
#include "train/device_setup.h"
#include "train/evaluate.h"
#include "train/loss.h"
#include "train/progress.h"
#include "train/run_dir.h"
#include "train/signals.h"
#include "train/train_step.h"

namespace cnn {

namespace fs = std::filesystem;

namespace {

class TrainSession {
 public:
  TrainSession(ModelSpec spec, const TrainOptions& opt) : m_spec(std::move(spec)), m_opt(opt) {}
  TrainResult run();

 private:
  void setup_data();
  void setup_model();
  void resume_or_init();
  bool run_epochs();  // false when stopped by a signal
  void end_of_epoch(int64_t epoch, double train_loss, double train_acc, int64_t images, double seconds);
  void save(const std::string& name, int64_t epoch, int64_t next_batch);
  void prune_epoch_checkpoints();
  CheckpointMeta meta(int64_t epoch, int64_t next_batch) const;
  void read_test_hook();

  ModelSpec m_spec;
  TrainOptions m_opt;
  std::optional<LoadedCheckpoint> m_resume;
  DataSplits m_data;
  Normalization m_norm;
  std::unique_ptr<Graph> m_graph;
  std::unique_ptr<DeviceSetup> m_dev;
  std::unique_ptr<Executor> m_ex;
  std::unique_ptr<Optimizer> m_optim;
  std::unique_ptr<LrSchedule> m_schedule;
  std::unique_ptr<LossFunction> m_loss;
  std::unique_ptr<TrainStep> m_train_step;
  std::unique_ptr<Loader> m_train_loader, m_val_loader;
  std::unique_ptr<RunDir> m_run;
  int64_t m_epoch = 0, m_next_batch = 0, m_step = 0;
  double m_loss_sum = 0, m_correct = 0;  // running sums of the epoch in progress
  int64_t m_seen = 0;
  int64_t m_test_stop_step = 0;  // test hook (read_test_hook): raise m_test_stop_signal after this step
  int m_test_stop_signal = SIGTERM;
  bool m_has_best = false;
  double m_best = 0;
  nlohmann::json m_last_metrics = nlohmann::json::object();
  std::chrono::steady_clock::time_point m_t0 = std::chrono::steady_clock::now();
  TrainResult m_result;
};

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
  spdlog::warn("test hook: raising signal {} after step {}", m_test_stop_signal, m_test_stop_step);
}

void TrainSession::setup_data() {
  m_data = load_dataset(m_spec.data, m_spec.input, m_spec.classes);
  for (const auto& note : m_data.notes) spdlog::info("data: {}", note);
  if (m_data.bad_skipped) spdlog::warn("data: {} bad rows/files skipped (data.on_bad_row: skip)", m_data.bad_skipped);
  spdlog::info("class histogram:\n{}", class_histogram_table(m_data));
  if (m_data.train.size() == 0) CNN_THROW("the training split of '{}' is empty", m_spec.data.path);
  if (m_spec.classes.empty() && !m_data.class_names.empty()) {
    // Class names found by the data (image-folder folders): use them and record them in config.yaml.
    m_graph->set_class_names(m_data.class_names);
    m_spec.classes = m_data.class_names;
    ConfigNode seq = ConfigNode::sequence({}, "classes");
    for (const auto& c : m_data.class_names) seq.push_back(ConfigNode::scalar(c));
    m_spec.root->set("classes", std::move(seq));
  }
  m_norm = resolve_normalization(m_spec.data.normalize, m_data.train);
  spdlog::info("normalisation: {}{}", m_norm.to_string(), m_spec.data.normalize.automatic ? " (auto, from train)" : "");
}

void TrainSession::setup_model() {
  m_dev = std::make_unique<DeviceSetup>(m_opt.device, *m_graph, m_spec.train.deterministic);
  const TrainSpec& t = m_spec.train;
  const int crops = m_spec.eval.ten_crop ? 10 : 1;
  const int64_t eval_batch = std::max<int64_t>(1, m_spec.eval.batch_size / crops);
  m_ex = std::make_unique<Executor>(*m_graph, std::max(t.batch_size, eval_batch * crops), m_dev->ctx());
  spdlog::info("model '{}': {} parameters, {:.1f} MFLOPs per training image, predicted memory at batch {}: {}",
               m_spec.name, m_graph->trainable_count(), m_graph->training_flops() / 1e6, t.batch_size,
               format_bytes(double(estimate_training_memory(*m_graph, m_spec, t.batch_size).total())));

  LoaderOptions lo;
  lo.batch_size = t.batch_size;
  lo.mode = LoaderMode::train;
  lo.seed = t.seed;
  lo.drop_last = m_spec.data.drop_last;
  lo.workers = m_spec.data.workers;
  lo.prefetch = m_spec.data.prefetch;
  m_train_loader = std::make_unique<Loader>(m_data.train, lo, m_norm, m_spec.data.augment);
  if (m_train_loader->output_shape() != m_graph->input_shape())
    CNN_THROW("the loader makes {} images but the network expects {}", m_train_loader->output_shape().to_string(),
              m_graph->input_shape().to_string());
  if (m_data.val.size() > 0) {
    LoaderOptions vo = lo;
    vo.mode = LoaderMode::eval;
    vo.batch_size = eval_batch;
    vo.ten_crop = m_spec.eval.ten_crop;
    vo.drop_last = false;
    m_val_loader = std::make_unique<Loader>(m_data.val, vo, m_norm, m_spec.data.augment);
  }
  std::vector<ParamSegment> segs;
  for (const ParamEntry& e : m_graph->params())
    if (e.trainable) segs.emplace_back(e.name, e.offset, e.shape.numel(), e.decay, e.shape);
  m_optim = make_optimizer(t.optimizer, segs, m_graph->params_size(), m_dev->device());
  m_schedule = std::make_unique<LrSchedule>(t.schedule, t.optimizer.lr, m_train_loader->batches_per_epoch(), t.epochs);
  m_loss = std::make_unique<LossFunction>(m_spec.loss, m_graph->num_classes(), m_data.train);
  m_train_step = std::make_unique<TrainStep>(*m_ex, *m_loss, *m_optim, t.clip_grad_norm);
  spdlog::info("loss: {}; optimizer: {} lr {}; {} steps per epoch", m_loss->describe(), t.optimizer.type,
               t.optimizer.lr, m_train_loader->batches_per_epoch());
}

void TrainSession::resume_or_init() {
  if (m_resume) {
    const LoadedCheckpoint& c = *m_resume;
    load_weights(*m_ex, c.file, true);
    m_optim->load_state(read_optimizer_tensors(c.file));
    m_optim->set_step_count(c.meta.optimizer_steps);
    m_schedule->load_state(c.meta.schedule);
    m_epoch = c.meta.epoch;
    m_next_batch = c.meta.next_batch;
    m_step = c.meta.step;
    m_has_best = c.meta.has_best;
    m_best = c.meta.best_metric;
    m_last_metrics = c.meta.metrics;
    if (m_next_batch > 0) {
      m_loss_sum = c.meta.epoch_progress.value("loss_sum", 0.0);
      m_correct = c.meta.epoch_progress.value("correct", 0.0);
      m_seen = c.meta.epoch_progress.value("seen", int64_t(0));
    }
    if (c.meta.dataset_fingerprint != m_data.fingerprint)
      spdlog::warn("the dataset differs from the checkpoint's ({} vs {}): the resumed run will not replay exactly",
                   m_data.fingerprint, c.meta.dataset_fingerprint);
    if (c.meta.seed != m_spec.train.seed)
      spdlog::warn("train.seed changed from {} to {}: data order and augmentation differ from the original run",
                   c.meta.seed, m_spec.train.seed);
    spdlog::info("resumed from '{}' at epoch {}, batch {} (step {})", c.path, m_epoch + 1, m_next_batch, m_step);
    return;
  }
  m_ex->init_params(m_spec.train.seed);
  if (!m_opt.init_from.empty()) {
    LoadedCheckpoint c = read_checkpoint(m_opt.init_from);
    std::vector<std::string> problems = load_weights(*m_ex, c.file, false);
    spdlog::info("initialised weights from '{}'", c.path);
    for (const auto& p : problems) spdlog::warn("--init-from: {} (left at their initial values / ignored)", p);
  }
}

CheckpointMeta TrainSession::meta(int64_t epoch, int64_t next_batch) const {
  CheckpointMeta m;
  m.config_yaml = to_yaml(*m_spec.root);
  m.epoch = epoch;
  m.next_batch = next_batch;
  m.step = m_step;
  m.schedule = m_schedule->state();
  m.seed = m_spec.train.seed;
  m.dataset_fingerprint = m_data.fingerprint;
  m.world_size = 1;
  m.metrics = m_last_metrics;
  m.has_best = m_has_best;
  m.best_metric = m_best;
  m.normalization = {{"mean", m_norm.mean}, {"std", m_norm.std}};
  if (next_batch > 0) m.epoch_progress = {{"loss_sum", m_loss_sum}, {"correct", m_correct}, {"seen", m_seen}};
  return m;
}

void TrainSession::save(const std::string& name, int64_t epoch, int64_t next_batch) {
  std::string path = m_run->checkpoints() + "/" + name + ".safetensors";
  write_checkpoint(path, *m_ex, m_optim.get(), meta(epoch, next_batch));
  if (name == "last") m_result.last_checkpoint = path;
  if (name == "best") m_result.best_checkpoint = path;
}

void TrainSession::prune_epoch_checkpoints() {
  int64_t keep = m_spec.train.checkpoint.keep_last;
  if (keep <= 0) return;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(m_run->checkpoints())) {
    std::string n = e.path().filename().string();
    if (n.rfind("epoch-", 0) == 0 && e.path().extension() == ".safetensors") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  for (size_t i = 0; i + size_t(keep) < files.size(); ++i) fs::remove(files[i]);
}

void TrainSession::end_of_epoch(int64_t epoch, double train_loss, double train_acc, int64_t images, double seconds) {
  nlohmann::json line{{"event", "epoch"},
                      {"epoch", epoch + 1},
                      {"step", m_step},
                      {"train_loss", train_loss},
                      {"train_acc", train_acc},
                      {"lr", m_schedule->lr(m_step > 0 ? m_step - 1 : 0)},
                      {"img_per_s", seconds > 0 ? double(images) / seconds : 0.0}};
  std::string val_text;
  if (m_val_loader) {
    EvalReport r = evaluate(*m_ex, *m_val_loader, m_graph->class_names(), "val", m_spec.loss.label_smoothing);
    line["val_loss"] = r.loss;
    line["val_acc"] = r.top1;
    val_text = fmt::format(", val loss {:.4f}, val acc {:.2f}%", r.loss, 100 * r.top1);
    bool by_acc = m_spec.train.checkpoint.best_metric == "val_acc";
    double metric = by_acc ? r.top1 : r.loss;
    if (!m_has_best || (by_acc ? metric > m_best : metric < m_best)) {
      m_has_best = true;
      m_best = metric;
      line["best"] = true;
    }
    m_schedule->on_epoch_end(epoch, m_spec.train.schedule.monitor == "val_acc" ? r.top1 : r.loss);
  } else {
    line["val_loss"] = nullptr;
    line["val_acc"] = nullptr;
    if (m_spec.train.schedule.type == "plateau") m_schedule->on_epoch_end(epoch, train_loss);
  }
  line["elapsed_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - m_t0).count();
  m_last_metrics = line;
  m_run->append_metrics(line);
  spdlog::info("epoch {}/{}: train loss {:.4f}, train acc {:.2f}%{}, {:.0f} img/s, {:.1f} s", epoch + 1,
               m_spec.train.epochs, train_loss, 100 * train_acc, val_text, line["img_per_s"].get<double>(), seconds);
  save("last", epoch + 1, 0);
  if (line.value("best", false) || !m_val_loader) save("best", epoch + 1, 0);
  int64_t every = m_spec.train.checkpoint.every_epochs;
  if (every > 0 && (epoch + 1) % every == 0) {
    save(fmt::format("epoch-{:04d}", epoch + 1), epoch + 1, 0);
    prune_epoch_checkpoints();
  }
}

bool TrainSession::run_epochs() {
  const TrainSpec& t = m_spec.train;
  Progress progress(stderr_is_terminal(), m_opt.quiet, t.log_every);
  Batch b;
  if (t.max_steps > 0 && m_step >= t.max_steps) {
    spdlog::info("train.max_steps = {} already reached (step {}): nothing to train", t.max_steps, m_step);
    return true;
  }
  for (int64_t epoch = m_epoch; epoch < t.epochs; ++epoch) {
    int64_t first = epoch == m_epoch ? m_next_batch : 0;
    m_train_loader->start_epoch(epoch, first);
    progress.start_epoch(epoch, t.epochs, m_train_loader->batches_per_epoch(), first);
    if (first == 0) m_loss_sum = m_correct = 0, m_seen = 0;
    double& loss_sum = m_loss_sum;
    double& correct = m_correct;
    int64_t& seen = m_seen;
    while (m_train_loader->next(b)) {
      const int64_t n = b.size();
      if (n == 0) continue;
      double lr = m_schedule->lr(m_step);
      load_batch_input(*m_ex, b);
      TrainStep::Result r = m_train_step->run(b.labels.data(), n, lr, uint64_t(m_step), t.seed);
      if (!std::isfinite(r.loss)) {
        progress.finish();
        load_batch_input(*m_ex, b);
        int bad = m_ex->forward_find_nonfinite(n, true, uint64_t(m_step), t.seed);
        std::string where = bad == -2  ? "the input batch"
                            : bad >= 0 ? fmt::format("layer '{}' ({})", m_graph->node(bad).layer->name(),
                                                     m_graph->node(bad).layer->type())
                                       : "the loss (all layer outputs are finite)";
        CNN_THROW(
            "training diverged at step {} (epoch {}, batch {}): the loss is {}; the first non-finite output is "
            "in {}. Try a lower train.optimizer.lr or train.clip_grad_norm.",
            m_step + 1, epoch + 1, b.index + 1, r.loss, where);
      }
      ++m_step;
      if (m_step == m_test_stop_step) std::raise(m_test_stop_signal);
      correct += double(r.correct);
      loss_sum += r.loss * double(n);
      seen += n;
      progress.update(b.index, n, loss_sum / double(seen), correct / double(seen), lr);
      bool max_reached = t.max_steps > 0 && m_step >= t.max_steps;
      if (int sig = stop_requested(); sig || max_reached) {
        progress.finish();
        save("last", epoch, b.index + 1);
        if (sig) {
          m_result.exit_code = 128 + sig;
          spdlog::warn("stopped by signal {} after step {}; checkpoint written to '{}'", sig, m_step,
                       m_result.last_checkpoint);
          spdlog::warn("resume with: cnn-train --resume {}", m_run->path());
          return false;
        }
        spdlog::info("train.max_steps = {} reached (epoch {}, batch {})", t.max_steps, epoch + 1, b.index + 1);
        return true;
      }
    }
    progress.finish();
    end_of_epoch(epoch, seen ? loss_sum / double(seen) : 0.0, seen ? correct / double(seen) : 0.0, seen,
                 progress.epoch_seconds());
  }
  return true;
}

TrainResult TrainSession::run() {
  if (!m_opt.resume.empty() && !m_opt.init_from.empty())
    throw ConfigError({"<command line>"}, "",
                      "--resume continues a run with its own weights; it cannot be combined "
                      "with --init-from (start a new run with --init-from instead)");
  read_test_hook();
  if (!m_opt.resume.empty()) {
    m_resume = read_checkpoint(m_opt.resume);
    check_resume_compatible(m_resume->meta.config_yaml, m_spec);
  }
  // Build the network first: config errors surface before any directory or data is touched.
  m_graph = Graph::build(m_spec);
  std::string dir = m_opt.out_dir;
  if (dir.empty() && m_resume) dir = fs::path(m_resume->path).parent_path().parent_path().string();
  if (dir.empty()) dir = default_run_dir(m_spec.name);
  m_run = std::make_unique<RunDir>(dir);
  m_result.run_dir = dir;
  spdlog::info("run directory: {}", dir);
  setup_data();
  setup_model();
  m_run->write_config(to_yaml(*m_spec.root));
  resume_or_init();
  install_stop_handlers();
  bool finished = run_epochs();
  uninstall_stop_handlers();
  m_result.steps = m_step;
  if (!finished) return m_result;
  if (m_data.test.size() > 0) {
    LoaderOptions to;
    to.mode = LoaderMode::eval;
    to.batch_size = std::max<int64_t>(1, m_spec.eval.batch_size / (m_spec.eval.ten_crop ? 10 : 1));
    to.ten_crop = m_spec.eval.ten_crop;
    to.workers = m_spec.data.workers;
    Loader test_loader(m_data.test, to, m_norm, m_spec.data.augment);
    m_result.test = evaluate(*m_ex, test_loader, m_graph->class_names(), "test", m_spec.loss.label_smoothing);
    m_result.has_test = true;
    nlohmann::json line{{"event", "test"},
                        {"step", m_step},
                        {"test_loss", m_result.test.loss},
                        {"test_acc", m_result.test.top1},
                        {"test_macro_f1", m_result.test.macro_f1}};
    m_run->append_metrics(line);
  }
  return m_result;
}

}  // namespace

TrainResult train_model(ModelSpec spec, const TrainOptions& options) {
  TrainSession session(std::move(spec), options);
  return session.run();
}

}  // namespace cnn
