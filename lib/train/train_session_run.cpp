// The life of a training run around its loop: the checks made before any file is written (resume
// compatibility, the device, --init-from), a resume with nothing left to train, taking the run
// directory, the end (test split, end line, result in train.log) and fatal errors, which reach
// train.log whatever ends the run. Trap: lines logged before the run directory exists are kept in
// a ring buffer and written to train.log first, so the log starts where the run started.
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "checkpoint/config_diff.h"
#include "eval/evaluate.h"
#include "train/run_summary.h"
#include "train/signals.h"
#include "train/train_session.h"

namespace cnn {

namespace fs = std::filesystem;

// The default logger's extra sink while it is attached (removed however the scope ends).
class ScopedSink {
 public:
  explicit ScopedSink(std::shared_ptr<spdlog::sinks::sink> sink) : m_sink(std::move(sink)) {
    spdlog::default_logger()->sinks().push_back(m_sink);
  }
  ~ScopedSink() { detach(); }
  ScopedSink(const ScopedSink&) = delete;
  ScopedSink& operator=(const ScopedSink&) = delete;
  void detach() {
    auto& sinks = spdlog::default_logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), m_sink), sinks.end());
  }

 private:
  std::shared_ptr<spdlog::sinks::sink> m_sink;
};

static std::string message_of(const std::exception& e) {
  const auto* err = dynamic_cast<const Error*>(&e);
  return err && !err->source_location().empty() ? fmt::format("{} [{}]", e.what(), err->source_location()) : e.what();
}

TrainResult TrainSession::run() {
  try {
    return run_session();
  } catch (const std::exception& e) {
    record_fatal(message_of(e));
    if (m_run && m_run->enabled() && m_started) {  // an error before training began ends no segment
      try {
        append_end("error", {{"message", e.what()}});
      } catch (...) {  // the disk may be what failed
      }
    }
    throw;
  }
}

void TrainSession::log_test_hooks() const {
  const TestHooks& h = m_opt.test_hooks;
  if (h.stop_at_step != 0 && (h.stop_rank < 0 || h.stop_rank == rank()))
    spdlog::warn("test hook: raising signal {} after step {}", h.stop_signal, h.stop_at_step);
  if (m_dist && h.kill_at_step != 0 && h.kill_rank == rank())
    spdlog::warn("test hook: this rank will {} at step {}", h.kill_stall ? "stall" : "die", h.kill_at_step);
}

void TrainSession::record_fatal(const std::string& message) noexcept {
  if (RunDir* run = m_fatal_log.load()) run->log_to_file(spdlog::level::err, message);
}

TrainResult TrainSession::run_session() {
  if (!m_opt.resume.empty() && !m_opt.init_from.empty())
    throw ConfigError({"<command line>"}, "",
                      "--resume continues a run with its own weights; it cannot be combined "
                      "with --init-from (start a new run with --init-from instead)");
  if (!m_opt.resume.empty() && m_opt.overwrite)
    throw ConfigError({"<command line>"}, "",
                      "--overwrite starts a new run in place of an old one; --resume continues one: give one of them");
  auto earlier = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(4096);
  ScopedSink keep_earlier(earlier);
  m_early = EarlyStopping(m_spec.train.early_stopping);
  if (m_opt.comm && m_opt.comm->distributed())
    m_dist = std::make_unique<DistContext>(*m_opt.comm, m_spec, m_opt,
                                           [this](const std::string& msg) { record_fatal(msg); });
  log_test_hooks();
  startup_begin();
  // Build the network first: config errors surface before any directory or data is touched, and
  // building writes every layer default into the config, resolving it as the checkpoint's was.
  if (!m_opt.resume.empty()) m_resume = read_checkpoint(m_opt.resume);
  try {
    m_model = std::make_unique<ModelStack>(m_spec);
  } catch (const ConfigError&) {
    // A model changed since the checkpoint may not even build: the differences say more.
    if (m_resume) check_resume_compatible(m_resume->meta.config_yaml, m_spec, ResumeCheck::before_data);
    throw;
  }
  startup_mark(m_resume ? "checkpoint read, graph build" : "graph build");
  // The data is read from here on, beside the driver and device set-up, where its reader allows;
  // its errors surface where a data error always has: after the run directory is taken.
  if (nothing_to_train_reason().empty()) start_data();
  check_before_touching_anything();
  startup_mark(m_device == Device::cuda ? "CUDA driver init" : "device choice");
  if (nothing_to_train()) return m_result;
  open_run_dir(earlier->last_raw());
  keep_earlier.detach();
  startup_mark("run directory");
  if (!m_data.loading()) setup_data();
  setup_model();
  m_run->write_config(to_yaml(m_spec.config));
  resume_or_init();
  if (m_dist) m_dist->start(*m_model, m_data);
  install_stop_handlers();
  bool finished = run_epochs();
  uninstall_stop_handlers();
  if (m_dist) m_dist->finish();
  m_result.steps = m_step;
  m_result.end_reason = m_end_reason;
  m_result.last_checkpoint = m_ckpt->last_path();
  m_result.best_checkpoint = m_ckpt->best_path();
  if (!finished || rank() != 0) return m_result;
  finish();
  return m_result;
}

void TrainSession::check_before_touching_anything() {
  if (m_resume) check_resume_compatible(m_resume->meta.config_yaml, m_spec, ResumeCheck::before_data);
  m_device = resolve_device(m_opt.device, m_model->graph());
  if (m_dist)
    check_same_on_all_ranks(m_dist->comm(), "the devices the ranks chose (pass --device cpu or --device cuda)",
                            to_string(m_device));
  if (m_opt.init_from.empty()) return;
  m_init = read_weights_checkpoint(m_opt.init_from);
  std::string ours, theirs;
  int matched = 0;
  for (const ParamEntry& e : m_model->graph().params()) {
    ours += (ours.empty() ? "" : ", ") + e.name + " " + e.shape.to_string();
    if (m_init->file.contains(e.name) && m_init->file.info(e.name).shape == e.shape.dims()) ++matched;
  }
  if (matched > 0) return;
  for (const std::string& name : m_init->file.names())
    if (name.rfind("optim.", 0) != 0) theirs += (theirs.empty() ? "" : ", ") + name + " " + Shape(m_init->file.info(name).shape).to_string();
  throw ConfigError({"--init-from"}, "",
                    fmt::format("no tensor of '{}' matches the model by name and shape, so nothing would be "
                                "initialised from it.\n  checkpoint: {}\n  model: {}",
                                m_init->path, theirs.empty() ? "(no weights)" : theirs, ours));
}

std::string TrainSession::nothing_to_train_reason() const {
  if (!m_resume) return "";
  const CheckpointMeta& m = m_resume->meta;
  const TrainSpec& t = m_spec.train;
  std::string why;
  if (t.max_steps > 0 && m.step >= t.max_steps) {
    why = fmt::format("step {} has reached train.max_steps = {}: give a larger --max-steps, or none to train on to "
                      "epoch {}",
                      m.step, t.max_steps, t.epochs);
  } else if (m.epoch >= t.epochs) {
    why = fmt::format("the run has finished its {} epoch{} (step {}): give a larger --epochs to train on", t.epochs,
                      t.epochs == 1 ? "" : "s", m.step);
  } else {
    EarlyStopping es(t.early_stopping);
    es.load_state(m.metrics.value("early_stopping", nlohmann::json()));
    if (es.should_stop())
      why = fmt::format("the run stopped early after epoch {}: {}; raise train.early_stopping.patience (0 is off) "
                        "to train on",
                        m.epoch, es.reason());
  }
  return why;
}

bool TrainSession::nothing_to_train() {
  const std::string why = nothing_to_train_reason();
  if (why.empty()) return false;
  const CheckpointMeta& m = m_resume->meta;
  spdlog::warn("nothing to train: {}; '{}' is left as it is", why, m_resume->path);
  const fs::path ckpt_dir = fs::path(m_resume->path).parent_path();
  m_result.run_dir = ckpt_dir.filename() == "checkpoints" ? ckpt_dir.parent_path().string() : ckpt_dir.string();
  m_result.last_checkpoint = m_resume->path;
  m_result.steps = m.step;
  m_result.end_reason = "nothing_to_train";
  return true;
}

// The directory of a resumed run is its checkpoint's (run/checkpoints/x.safetensors) unless --out
// says otherwise; resuming into another directory starts that directory's files afresh.
void TrainSession::open_run_dir(const std::vector<spdlog::details::log_msg_buffer>& earlier) {
  std::string resumed_dir;
  if (m_resume) {
    const fs::path ckpt_dir = fs::path(m_resume->path).parent_path();
    if (ckpt_dir.filename() == "checkpoints") resumed_dir = ckpt_dir.parent_path().string();
  }
  std::string dir = m_opt.out_dir;
  if (dir.empty()) dir = !resumed_dir.empty() ? resumed_dir : default_run_dir(m_spec.name);
  if (rank() != 0) {  // the other ranks write nothing
    m_run = std::make_unique<RunDir>();
    m_ckpt.emplace(m_spec.train.checkpoint, "");
    return;
  }
  std::error_code ec;
  RunDirClaim claim = m_opt.overwrite ? RunDirClaim::overwrite : RunDirClaim::fresh;
  if (!resumed_dir.empty() && fs::equivalent(dir, resumed_dir, ec)) claim = RunDirClaim::resume;
  m_run = std::make_unique<RunDir>(dir, claim, earlier);
  m_ckpt.emplace(m_spec.train.checkpoint, m_run->checkpoints());
  m_fatal_log.store(m_run.get());
  m_result.run_dir = dir;
  spdlog::info("run directory: {}", dir);
}

void TrainSession::append_end(const std::string& reason, nlohmann::json extra) {
  extra["event"] = "end";
  extra["reason"] = reason;
  extra["step"] = m_step;
  extra["steps_trained"] = m_step - m_start_step;
  if (const LossScaler* scaler = m_model ? m_model->loss_scaler() : nullptr) {
    extra["loss_scale"] = scaler->last().scale;
    extra["skipped_steps"] = scaler->last().skipped_steps;
  }
  extra["elapsed_s"] = seconds_since_start();
  m_run->append_metrics(extra);
}

void TrainSession::finish() {
  if (m_data.splits().test.size() > 0) {
    if (m_epoch_test && m_epoch_test->first == m_step) {  // the last epoch line tested these very weights
      m_result.test = std::move(m_epoch_test->second);
    } else {
      m_result.test = evaluate(m_model->executor(), m_data.test_loader(), m_model->graph().class_names(), "test",
                               m_spec.loss.label_smoothing);
    }
    m_result.has_test = true;
    nlohmann::json line{{"event", "test"},
                        {"step", m_step},
                        {"test_loss", m_result.test.loss},
                        {"test_acc", m_result.test.top1},
                        {"test_macro_f1", m_result.test.macro_f1}};
    m_run->append_metrics(line);
  }
  nlohmann::json extra = nlohmann::json::object();
  if (m_end_reason == "early_stopping") extra = {{"metric", m_spec.train.early_stopping.metric}, {"message", m_early.reason()}};
  extra["startup"] = startup_report();
  append_end(m_end_reason, extra);
  // What the program prints on stdout, for the log (the console has it once, from the program).
  m_run->log_to_file(spdlog::level::info, "result:\n" + format_train_result(m_result));
}

// A failing rank ends the whole job before unwinding: a peer waiting in a collective would
// otherwise hang, and so could this rank's own NCCL and CUDA teardown.
[[noreturn]] static void end_job(const TrainOptions& options, const std::string& message, int code) {
  if (options.on_fatal) options.on_fatal(message, code);
  std::fprintf(stderr, "error: rank %d (%s): %s\n", options.comm->rank(), options.comm->host().c_str(),
               message.c_str());
  std::fflush(stderr);
  options.comm->abort(code);
  std::_Exit(code);  // abort() never returns; this keeps the compiler sure of it
}

TrainResult train_model(ModelSpec spec, const TrainOptions& options) {
  TrainSession session(std::move(spec), options);
  if (!options.comm || !options.comm->distributed()) return session.run();
  try {
    return session.run();
  } catch (const ConfigError& e) {
    end_job(options, e.what(), 2);
  } catch (const std::exception& e) {
    end_job(options, e.what(), 1);
  }
}

}  // namespace cnn
