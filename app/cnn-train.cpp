// cnn-train: trains a model from its YAML file (`cnn-train MODEL.yaml [options]`, data-parallel
// under mpirun/srun); `cnn-train validate MODEL.yaml...` checks models and prints their per-layer
// tables (`validate --keys` prints the reference of every model-file key); `cnn-train doctor` reports every rank's libraries, GPU and all-reduce bandwidth.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "cli_common.h"
#include "config/model_spec.h"
#include "dist/communicator.h"
#include "dist/doctor.h"
#include "graph/graph.h"
#include "graph/summary.h"
#include "checkpoint/checkpoint_state.h"
#include "core/process_clock.h"
#include "train/run_summary.h"
#include "train/trainer.h"

using namespace cnn;

static int run_validate(const std::vector<std::string>& files, int64_t batch, const std::vector<std::string>& sets,
                        bool keys) {
  if (keys) {
    std::cout << model_reference_markdown(LayerRegistry::builtin().schemas());
    if (files.empty()) return 0;
  }
  if (files.empty()) throw ConfigError({"<command line>"}, "", "give MODEL.yaml file(s) to validate, or --keys");
  for (const std::string& f : files) {
    ModelSpec spec = load_model_spec(f, sets);
    auto graph = Graph::build(spec);
    std::cout << format_model_table(*graph, spec, batch > 0 ? batch : spec.train.batch_size) << "ok: " << f << "\n\n";
  }
  return 0;
}

struct TrainArgs {
  std::string model, out, device = "auto", resume, init_from, backend, precision;
  std::vector<std::string> sets;
  int64_t epochs = 0, batch = 0, max_steps = -1;
  uint64_t seed = 0;
  bool has_seed = false, deterministic = false, quiet = false, no_cuda_graph = false, overwrite = false;
  std::vector<TrainOptions::StartupMark> startup;  // the start-up breakdown's phases before train_model
};

// Ranks other than 0 log warnings and errors only, each line naming the rank.
static std::unique_ptr<Communicator> make_job_communicator() {
  std::unique_ptr<Communicator> comm = make_communicator();
  if (comm->rank() != 0) {
    spdlog::default_logger()->set_pattern(fmt::format("%^%l%$: rank {} ({}): %v", comm->rank(), comm->host()));
    spdlog::default_logger()->set_level(spdlog::level::warn);
  }
  return comm;
}

static int run_doctor(const DoctorOptions& o) {
  std::unique_ptr<Communicator> comm = make_job_communicator();
  DoctorReport r;
  try {
    r = run_doctor(*comm, o);
  } catch (const std::exception& e) {
    if (comm->size() == 1) throw;
    std::fprintf(stderr, "cnn-train: error: rank %d (%s): %s\n", comm->rank(), comm->host().c_str(), e.what());
    comm->abort(1);  // the other ranks may be waiting in a collective
  }
  if (comm->rank() == 0) std::cout << r.text;
  return r.mismatches.empty() ? 0 : 1;
}

static bool sets_key(const std::vector<std::string>& sets, const std::string& key) {
  for (const auto& s : sets)
    if (s.rfind(key + "=", 0) == 0) return true;
  return false;
}

static int run_train(TrainArgs& a) {
  // Command-line options are --set overrides, so the resolved config records them. The options
  // were range-checked when parsed (exit 2 before anything is read or created).
  std::vector<std::string> sets;
  if (a.epochs > 0) sets.push_back(fmt::format("train.epochs={}", a.epochs));
  if (a.batch > 0) sets.push_back(fmt::format("train.batch_size={}", a.batch));
  if (a.has_seed) sets.push_back(fmt::format("train.seed={}", a.seed));
  if (a.deterministic) sets.push_back("train.deterministic=true");
  if (a.max_steps >= 0) sets.push_back(fmt::format("train.max_steps={}", a.max_steps));
  if (a.no_cuda_graph) sets.push_back("train.cuda_graph=false");
  if (!a.backend.empty()) sets.push_back("train.backend=" + a.backend);
  for (const std::string& s : app::precision_override(a.precision)) sets.push_back(s);
  sets.insert(sets.end(), a.sets.begin(), a.sets.end());
  ModelSpec spec;
  if (!a.model.empty()) {
    spec = load_model_spec(a.model, sets);
  } else if (!a.resume.empty()) {
    // A --max-steps stop is a pause like a signal's: the resumed run trains on unless given a new limit.
    if (!sets_key(sets, "train.max_steps")) sets.push_back("train.max_steps=0");
    LoadedCheckpoint c = read_checkpoint(a.resume);
    spec = parse_model_text(c.meta.config_yaml, c.path + " (config)", sets);
  } else {
    throw ConfigError({"<command line>"}, "", "give a MODEL.yaml to train, or --resume RUN_DIR|CKPT");
  }
  a.startup.push_back({"config load (YAML)", process_seconds()});
  std::unique_ptr<Communicator> comm = make_job_communicator();
  if (comm->distributed()) a.startup.push_back({"MPI init", process_seconds()});
  TrainOptions opt;
  opt.comm = comm.get();
  opt.on_fatal = [&comm](const std::string& message, int code) {
    std::fprintf(stderr, "cnn-train: error: rank %d (%s): %s\n", comm->rank(), comm->host().c_str(), message.c_str());
    std::fflush(stderr);
    comm->abort(code);
  };
  opt.out_dir = a.out;
  opt.device = a.device;
  opt.quiet = a.quiet;
  opt.resume = a.resume;
  opt.overwrite = a.overwrite;
  opt.init_from = a.init_from;
  opt.test_hooks = parse_test_hooks([](const char* name) { return std::getenv(name); });  // CNN_TEST_*: tests only
  opt.startup_marks = a.startup;
  TrainResult r = train_model(std::move(spec), opt);
  if (r.exit_code) return r.exit_code;
  if (comm->rank() == 0) std::cout << format_train_result(r);
  return 0;
}

int main(int argc, char** argv) {
  const double main_s = process_seconds();
  CLI::App cli{"cnn-train: train a convolutional network described by a YAML model file"};
  app::add_version_flag(cli, "cnn-train");
  app::AutotuneFlags tune;
  app::add_autotune_flags(cli, tune);
  cli.require_subcommand(0, 1);

  TrainArgs t;
  cli.add_option("model", t.model, "model YAML file");
  const auto devices = CLI::IsMember({"auto", "cpu", "cuda"});
  cli.add_option("--out", t.out, "run directory (default runs/<model>-<timestamp>)");
  cli.add_flag("--overwrite", t.overwrite, "replace the run in --out (its files are removed first)");
  cli.add_option("--device", t.device, "auto | cpu | cuda (auto: the GPU when one is usable)")->check(devices);
  cli.add_option("--epochs", t.epochs, "override train.epochs")->check(app::at_least(1));
  cli.add_option("--batch", t.batch, "override train.batch_size")->check(app::at_least(1));
  cli.add_option("--seed", t.seed, "override train.seed")
      ->check(app::not_negative())
      ->each([&](const std::string&) { t.has_seed = true; });
  cli.add_flag("--deterministic", t.deterministic, "reproducible results (same numbers on every run)");
  cli.add_option("--max-steps", t.max_steps, "stop after this many optimizer steps in all (0: no limit)")
      ->check(app::at_least(0));
  cli.add_flag("--no-cuda-graph", t.no_cuda_graph, "run the GPU training step uncaptured (train.cuda_graph=false)");
  cli.add_option("--backend", t.backend,
                 "on a GPU, layers left auto use this backend where they can: auto | cuda | cudnn (train.backend)")
      ->check(CLI::IsMember({"auto", "cuda", "cudnn"}));
  app::add_precision_option(cli, t.precision, "the model file's, fp32; on --resume the checkpoint's");
  cli.add_option("--resume", t.resume, "continue a run from RUN_DIR or a checkpoint")->check(CLI::ExistingPath);
  cli.add_option("--init-from", t.init_from, "start from a checkpoint's weights (fine-tuning)")
      ->check(CLI::ExistingPath);
  cli.add_option("--set", t.sets, "override a config key: KEY=VALUE (repeatable)");
  cli.add_flag("--quiet", t.quiet, "only warnings and errors");

  std::vector<std::string> val_files, val_sets;
  int64_t val_batch = 0;
  bool val_keys = false;
  CLI::App* validate = cli.add_subcommand("validate", "check model files and print their per-layer tables");
  validate->add_option("model", val_files, "model YAML file(s)");
  validate->add_flag("--keys", val_keys, "print the reference of every model-file key (Markdown)");
  validate->add_option("--batch", val_batch, "batch size for the memory estimate (default: train.batch_size)")
      ->check(app::at_least(1));
  validate->add_option("--set", val_sets, "override a config key: KEY=VALUE (repeatable)");

  DoctorOptions doc;
  CLI::App* doctor = cli.add_subcommand("doctor", "every rank's CUDA/cuDNN/NCCL/MPI versions, GPU and all-reduce bandwidth");
  doctor->add_option("--device", doc.device, "auto | cpu | cuda: where the probe's buffer lives")->check(devices);
  doctor->add_option("--size-mb", doc.size_mb, "MiB all-reduced per probe iteration (default 64)")
      ->check(CLI::PositiveNumber);
  doctor->add_option("--iters", doc.iterations, "timed probe iterations (default 5)")->check(app::at_least(1));

  return app::guarded_main("cnn-train", cli, argc, argv, [&]() -> int {
    app::setup_logging(t.quiet);
    t.startup = {{"static initialisers to main", main_s}, {"command line, logging", process_seconds()}};
    const std::vector<std::string> tune_sets = app::autotune_overrides(tune);
    t.sets.insert(t.sets.begin(), tune_sets.begin(), tune_sets.end());  // an explicit --set still wins
    val_sets.insert(val_sets.begin(), tune_sets.begin(), tune_sets.end());
    if (*validate) return run_validate(val_files, val_batch, val_sets, val_keys);
    if (*doctor) return run_doctor(doc);
    return run_train(t);
  });
}
