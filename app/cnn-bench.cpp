// cnn-bench: timing. `cnn-bench model MODEL.yaml` measures training-step throughput and, with
// --layers, a per-layer forward/backward table, and --breakdown, the step's time by kernel category
// and idle gaps; with --inference, cnn-eval's forward passes instead; `cnn-bench conv [SWEEP.yaml
// ...] [--models]` times every convolution implementation on sweep points and model layers.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli_common.h"
#include "config/model_spec.h"
#include "bench/benchmark.h"
#include "tune/autotune.h"
#include "bench/conv_bench.h"

using namespace cnn;

int main(int argc, char** argv) {
  CLI::App cli{"cnn-bench: training-step and inference throughput and per-layer timing"};
  app::add_version_flag(cli, "cnn-bench");
  app::AutotuneFlags tune;
  app::add_autotune_flags(cli, tune);
  cli.require_subcommand(1, 1);
  bool quiet = false;
  cli.add_flag("--quiet", quiet, "only warnings and errors");

  std::string model, json_path;
  std::vector<std::string> sets;
  ModelBenchOptions opt;
  CLI::App* m = cli.add_subcommand(
      "model", "time whole training steps (or, with --inference, forward passes) of a model on synthetic data");
  m->add_option("model", model, "model YAML file")->required();
  m->add_option("--device", opt.device, "auto | cpu | cuda");
  m->add_flag("--inference", opt.inference,
              "time forward passes in evaluation mode (cnn-eval's) instead of training steps, on the device and end to end");
  m->add_option("--batch", opt.batch, "batch size (default: train.batch_size)");
  m->add_option("--steps", opt.steps, "timed steps per repeat (default 20)");
  m->add_option("--warmup", opt.warmup, "untimed steps first (default 5)");
  m->add_option("--repeats", opt.repeats, "repeats; the median is reported (default 5)");
  m->add_flag("--layers", opt.layers, "per-layer forward/backward table");
  m->add_flag("--breakdown", opt.breakdown,
              "GPU: trace the kernels of --steps more steps and split the step into kernel categories and idle gaps");
  m->add_option("--json", json_path, "write the result as JSON");
  m->add_option("--dump", opt.dump_path, "write the first step (weights, batch, logits, gradients) as safetensors");
  m->add_option("--set", sets, "override a config key: KEY=VALUE (repeatable)");
  bool no_cuda_graph = false;
  m->add_flag("--no-cuda-graph", no_cuda_graph, "time the GPU step uncaptured (train.cuda_graph=false)");
  std::string backend;
  m->add_option("--backend", backend,
                "on a GPU, layers left auto use this backend where they can: auto | cuda | cudnn (train.backend)");
  std::string precision;
  app::add_precision_option(*m, precision, "the model file's, fp32");

  std::vector<std::string> sweeps, model_files;
  bool models = false;
  std::string csv_path, conv_json;
  ConvBenchOptions copt;
  CLI::App* c = cli.add_subcommand("conv", "time every convolution implementation on sweep points and model layers");
  c->add_option("sweeps", sweeps, "sweep files (bench/sweeps/README.md)");
  c->add_flag("--models", models, "add every conv layer of models/*.yaml (or of --model files), deduplicated");
  c->add_option("--model", model_files, "model file whose conv layers to add (repeatable; implies --models)");
  c->add_option("--device", copt.device, "auto | cpu | cuda");
  c->add_option("--impl", copt.impl_glob, "only implementations matching this pattern (e.g. 'cuda:*')");
  c->add_option("--direction", copt.direction, "all | forward | backward_data | backward_filter")
      ->check(CLI::IsMember({"all", "forward", "backward_data", "backward_filter"}));
  c->add_option("--repeats", copt.repeats, "timed runs per point (default: the sweep file's)");
  c->add_option("--warmup", copt.warmup, "untimed runs per point (default: the sweep file's)");
  std::vector<std::string> sweep_names, shape_names;
  c->add_option("--sweep", sweep_names, "only these sweeps of the sweep files (names or patterns, comma-separated)")
      ->delimiter(',');
  c->add_option("--shape", shape_names, "only these base shapes of the sweep files (names or patterns, comma-separated)")
      ->delimiter(',');
  c->add_option("--cutoff", copt.cutoff,
                "abandon a candidate whose first timed run is over X times the best so far at its point and direction "
                "(one run kept; X >= 1; default 0: off)");
  c->add_option("--max-seconds-per-point", copt.max_seconds_per_point,
                "past this, a point's remaining candidates get one timed run (status 'time box'; default 0: off)");
  c->add_option("--max-seconds", copt.max_seconds, "start no point after this many seconds (default 0: no limit)");
  c->add_option("--spread", copt.spread,
                "stop repeating once 2+ timed runs are within this fraction of their median (default 0: off)");
  bool no_dedupe = false, append = false, list = false;
  c->add_flag("--no-dedupe", no_dedupe, "time a point even where an earlier point had its shape (default: copy)");
  c->add_flag("--append", append, "keep the --csv file's rows, skip the (point, direction) pairs it has, append");
  c->add_flag("--list", list, "print the points that would be timed and exit");
  c->add_option("--csv", csv_path, "write one row per (point, direction, implementation) as CSV, point by point");
  c->add_option("--json", conv_json, "write the rows, summaries and group means as JSON");
  std::string conv_precision = "fp32";
  c->add_option("--precision", conv_precision,
                "what the implementations may do: fp32 | tf32 (cuDNN on TF32 tensor cores; default fp32)")
      ->check(CLI::IsMember({"fp32", "tf32"}));

  auto write = [](const std::string& path, const std::string& text) {
    std::ofstream f(path);
    f << text;
    if (!f) throw Error("cannot write " + path);
  };
  auto run_conv = [&]() -> int {
    if (copt.repeats == 0 || copt.warmup < -1 || copt.repeats < -1)
      throw ConfigError({"<command line>"}, "", "--repeats must be >= 1, --warmup >= 0");
    std::vector<ConvPoint> points;
    for (const std::string& s : sweeps)
      for (ConvPoint& p : load_conv_sweep(s)) points.push_back(std::move(p));
    if (models && model_files.empty())
      for (const auto& e : std::filesystem::directory_iterator("models"))
        if (e.path().extension() == ".yaml") model_files.push_back(e.path().string());
    std::sort(model_files.begin(), model_files.end());
    for (ConvPoint& p : model_conv_points(model_files)) points.push_back(std::move(p));
    points = select_conv_points(points, sweep_names, shape_names);
    if (points.empty()) throw ConfigError({"<command line>"}, "", "nothing to time: give sweep files and/or --models");
    // Written so that NaN fails every test (infinity is no bound, and allowed).
    if (!(copt.cutoff == 0 || copt.cutoff >= 1) || !(copt.max_seconds_per_point >= 0) || !(copt.max_seconds >= 0) ||
        !(copt.spread >= 0))
      throw ConfigError({"<command line>"}, "", "--cutoff must be 0 or >= 1; --max-seconds*, --spread >= 0");
    if (append && csv_path.empty()) throw ConfigError({"<command line>"}, "--append", "--append needs --csv FILE");
    if (list) {
      for (const ConvPoint& p : points) std::cout << p.group << "\t" << p.name << "\t" << p.shape.to_string() << "\n";
      std::cout << points.size() << " points\n";
      return 0;
    }
    copt.dedupe = !no_dedupe;
    std::ofstream csv;
    if (!csv_path.empty()) {
      const bool keep = append && std::filesystem::exists(csv_path);
      if (keep) {
        std::stringstream text;
        text << std::ifstream(csv_path).rdbuf();
        copt.done = conv_csv_pairs(text.str(), csv_path);
      }
      csv.open(csv_path, keep ? std::ios::app : std::ios::trunc);
      if (!keep) csv << ConvBenchResult::csv_header();
      if (!csv.flush()) throw Error("cannot write " + csv_path);
      copt.on_rows = [&](const ConvBenchResult& r, size_t first) {
        if (!(csv << r.csv_rows(first)).flush()) throw Error("cannot write " + csv_path);
      };
    }
    const AutotuneOptions tune_opt = AutotuneOptions::from_spec(app::autotune_spec(tune));
    copt.workspace_limit_bytes = tune_opt.workspace_limit_bytes;
    copt.tolerance = tune_opt.tolerance;
    copt.tolerance_given = tune_opt.tolerance_given;
    copt.math = parse_math_mode(conv_precision);
    ConvBenchResult r = bench_conv(points, copt);
    std::cout << r.to_table();
    if (!conv_json.empty()) write(conv_json, r.to_json().dump(1) + "\n");
    return 0;
  };

  return app::guarded_main("cnn-bench", cli, argc, argv, [&]() -> int {
    app::setup_logging(quiet);
    if (*c) return run_conv();
    if (opt.steps < 1 || opt.repeats < 1 || opt.warmup < 0)
      throw ConfigError({"<command line>"}, "", "--steps and --repeats must be >= 1, --warmup >= 0");
    if (no_cuda_graph) sets.push_back("train.cuda_graph=false");
    if (!backend.empty()) sets.push_back("train.backend=" + backend);
    for (const std::string& s : app::precision_override(precision)) sets.push_back(s);
    for (const std::string& s : app::autotune_overrides(tune)) sets.push_back(s);
    ModelBenchResult r = bench_model(load_model_spec(model, sets), opt);
    std::cout << r.to_table();
    if (!json_path.empty()) {
      std::ofstream f(json_path);
      f << r.to_json().dump(2) << "\n";
      if (!f) throw Error("cannot write " + json_path);
    }
    return 0;
  });
}
