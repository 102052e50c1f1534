// cnn-train: trains a model from its YAML file; `cnn-train validate MODEL.yaml...` checks models
// and prints their per-layer tables.
#include <CLI/CLI.hpp>

#include <iostream>

#include "cli_common.h"
#include "config/model_spec.h"
#include "graph/graph.h"
#include "graph/summary.h"

using namespace cnn;

static int run_validate(const std::vector<std::string>& files, int64_t batch, const std::vector<std::string>& sets) {
  for (const std::string& f : files) {
    ModelSpec spec = load_model_spec(f, sets);
    auto graph = Graph::build(spec);
    std::cout << format_model_table(*graph, spec, batch > 0 ? batch : spec.train.batch_size) << "ok: " << f << "\n\n";
  }
  return 0;
}

int main(int argc, char** argv) {
  CLI::App cli{"cnn-train: train a convolutional network described by a YAML model file"};
  app::add_version_flag(cli, "cnn-train");
  cli.require_subcommand(0, 1);

  std::vector<std::string> val_files, sets;
  int64_t val_batch = 0;
  CLI::App* validate = cli.add_subcommand("validate", "check model files and print their per-layer tables");
  validate->add_option("model", val_files, "model YAML file(s)")->required()->check(CLI::ExistingFile);
  validate->add_option("--batch", val_batch, "batch size for the memory estimate (default: train.batch_size)");
  validate->add_option("--set", sets, "override a config key: KEY=VALUE (repeatable)");

  return app::guarded_main("cnn-train", cli, argc, argv, [&]() -> int {
    if (*validate) return run_validate(val_files, val_batch, sets);
    std::cerr << cli.help();
    return 2;
  });
}
