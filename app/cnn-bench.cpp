// cnn-bench: timing. `cnn-bench model MODEL.yaml` measures training-step throughput and, with
// --layers, a per-layer forward/backward table.
#include <CLI/CLI.hpp>

#include <fstream>
#include <iostream>

#include "cli_common.h"
#include "config/model_spec.h"
#include "train/benchmark.h"

using namespace cnn;

int main(int argc, char** argv) {
  CLI::App cli{"cnn-bench: training-step throughput and per-layer timing"};
  app::add_version_flag(cli, "cnn-bench");
  app::AutotuneFlags tune;
  app::add_autotune_flags(cli, tune);
  cli.require_subcommand(1, 1);
  bool quiet = false;
  cli.add_flag("--quiet", quiet, "only warnings and errors");

  std::string model, json_path;
  std::vector<std::string> sets;
  ModelBenchOptions opt;
  CLI::App* m = cli.add_subcommand("model", "time whole training steps of a model on synthetic data");
  m->add_option("model", model, "model YAML file")->required();
  m->add_option("--device", opt.device, "auto | cpu | cuda");
  m->add_option("--batch", opt.batch, "batch size (default: train.batch_size)");
  m->add_option("--steps", opt.steps, "timed steps per repeat (default 20)");
  m->add_option("--warmup", opt.warmup, "untimed steps first (default 5)");
  m->add_option("--repeats", opt.repeats, "repeats; the median is reported (default 5)");
  m->add_flag("--layers", opt.layers, "per-layer forward/backward table");
  m->add_option("--json", json_path, "write the result as JSON");
  m->add_option("--dump", opt.dump_path, "write the first step (weights, batch, logits, gradients) as safetensors");
  m->add_option("--set", sets, "override a config key: KEY=VALUE (repeatable)");
  bool no_cuda_graph = false;
  m->add_flag("--no-cuda-graph", no_cuda_graph, "time the GPU step uncaptured (train.cuda_graph=false)");

  return app::guarded_main("cnn-bench", cli, argc, argv, [&]() -> int {
    app::setup_logging(quiet);
    app::export_autotune_flags(tune);
    if (opt.steps < 1 || opt.repeats < 1 || opt.warmup < 0)
      throw ConfigError({"<command line>"}, "", "--steps and --repeats must be >= 1, --warmup >= 0");
    if (no_cuda_graph) sets.push_back("train.cuda_graph=false");
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
