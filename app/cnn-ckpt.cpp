// cnn-ckpt: reads checkpoints. `inspect CKPT` (metadata and a per-tensor table; exit 1 when a
// checksum fails or a reader would refuse the metadata), `verify CKPT` (exit 1 with the first
// problem when a resume would fail or the file is damaged) and `diff A B` (exit 0 when the tensors
// are equal, 1 when they differ; metadata differences are listed, not counted); --json prints the
// same as one JSON object.
// CKPT may be a run directory (its checkpoints/last.safetensors). The logic is lib/checkpoint/ckpt_tools.
#include <CLI/CLI.hpp>

#include <iostream>

#include "cli_common.h"
#include "checkpoint/ckpt_tools.h"

using namespace cnn;

// A report as indented JSON. Messages in it may quote a hostile file's bytes cut short by another
// module (a config error's excerpt): invalid UTF-8 is replaced (U+FFFD), not a failed report.
static std::string json_text(const nlohmann::json& j) {
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

int main(int argc, char** argv) {
  CLI::App cli{"cnn-ckpt: inspect, verify and compare cnn-train checkpoints (safetensors files)"};
  app::add_version_flag(cli, "cnn-ckpt");
  cli.require_subcommand(1);

  std::string path, path_b;
  bool json = false, show_config = false;
  CLI::App* inspect = cli.add_subcommand("inspect", "print a checkpoint's metadata and a table of its tensors");
  inspect->add_option("checkpoint", path, "checkpoint file, or a run directory")->required();
  inspect->add_flag("--json", json, "print one JSON object instead of text (exit 1 still when a check fails)");
  inspect->add_flag("--config", show_config,
                    "print the resolved config (YAML) the checkpoint carries and nothing else");

  CLI::App* verify = cli.add_subcommand(
      "verify",
      "check headers, checksums, metadata and that the tensors fit the model and optimizer of the config; "
      "exit 0 when valid, 1 when not");
  verify->add_option("checkpoint", path, "checkpoint file, or a run directory")->required();
  verify->add_flag("--json", json, "print one JSON object instead of text");

  CLI::App* diff = cli.add_subcommand(
      "diff",
      "compare two checkpoints: every tensor, then config and metadata; exit 0 when the tensors are equal, 1 when "
      "they differ (metadata differences are listed but do not count)");
  diff->add_option("a", path, "first checkpoint or run directory")->required();
  diff->add_option("b", path_b, "second checkpoint or run directory")->required();
  diff->add_flag("--json", json, "print one JSON object instead of text");

  return app::guarded_main("cnn-ckpt", cli, argc, argv, [&]() -> int {
    if (*inspect) {
      InspectReport r = inspect_checkpoint(path);
      if (show_config) {
        if (r.config_yaml.empty()) throw Error("'" + r.path + "' carries no config (metadata key 'config')");
        std::cout << r.config_yaml;
        return 0;
      }
      std::cout << (json ? json_text(to_json(r)) : to_text(r));
      if (r.ok()) return 0;
      std::cerr << "cnn-ckpt: error: "
                << (r.checksum_problem.empty() ? r.metadata_problem
                                               : "checkpoint '" + r.path + "' fails its checksums: " + r.checksum_problem)
                << "\n";
      return 1;
    }
    if (*verify) {
      VerifyReport r = verify_checkpoint(path);
      std::cout << (json ? json_text(to_json(r)) : to_text(r));
      if (r.ok()) return 0;
      std::cerr << "cnn-ckpt: error: '" << r.path << "' is not a valid checkpoint: " << r.problems.front() << "\n";
      return 1;
    }
    DiffReport r = diff_checkpoints(path, path_b);
    std::cout << (json ? json_text(to_json(r)) : to_text(r));
    return r.tensors_equal() ? 0 : 1;
  });
}
