// cnn-ckpt: reads checkpoints. `inspect CKPT` (metadata and a per-tensor table; exit 1 when a
// checksum fails or a reader would refuse the metadata), `verify CKPT` (exit 1 with the first
// problem when a resume would fail or the file is damaged) and `diff A B` (exit 0 when the tensors
// are equal, 1 when they differ; metadata differences are listed, not counted); --json prints the
// same as one JSON object. `export CKPT -o model.onnx` writes the model as ONNX (lib/onnx; exit 1
// with a message in a build without the ONNX library).
// CKPT may be a run directory (its checkpoints/last.safetensors). The logic is lib/checkpoint/ckpt_tools.
#include <CLI/CLI.hpp>

#include <iostream>

#include "cli_common.h"
#include "checkpoint/ckpt_tools.h"
#include "onnx/export.h"
#include "onnx/write.h"

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

  std::string onnx_path, onnx_batch = "dynamic";
  int opset = kOnnxMaxOpset;
  bool keep_bn = false, fold_bn = false;
  CLI::App* exp = cli.add_subcommand(
      "export", "write the checkpoint as an ONNX model: images of the data input size (pixels 0..255) in, softmax "
                "probabilities out, class names and config in its metadata; checked by the ONNX checker");
  exp->add_option("checkpoint", path, "checkpoint file, or a run directory (its best checkpoint, else its last)")
      ->required();
  exp->add_option("-o,--output", onnx_path, "the ONNX file to write")->required();
  exp->add_option("--batch", onnx_batch, "batch dimension: dynamic (default) or a fixed size N >= 1")
      ->check(CLI::Validator(
          [](std::string& v) {
            if (v == "dynamic") return std::string();
            if (v.empty() || v.size() > 9 || v.find_first_not_of("0123456789") != std::string::npos || std::stoll(v) < 1)
              return "--batch: expected dynamic or an integer >= 1, found '" + v + "'";
            return std::string();
          },
          "dynamic|N", "batch"));
  exp->add_option("--opset", opset, "ONNX opset version")
      ->check(CLI::Range(kOnnxMinOpset, kOnnxMaxOpset));
  auto* fold_flag = exp->add_flag("--fold-batchnorm", fold_bn,
                                  "fold each batchnorm into the conv2d or dense layer that alone feeds it (default)");
  exp->add_flag("--keep-batchnorm", keep_bn, "keep every batchnorm as a BatchNormalization node")->excludes(fold_flag);

  return app::guarded_main("cnn-ckpt", cli, argc, argv, [&]() -> int {
    if (*exp) {
      if (!onnx_export_built()) {
        std::cerr << "cnn-ckpt: error: " << onnx_missing_message() << "\n";
        return 1;
      }
      OnnxLowerOptions o;
      o.batch = onnx_batch == "dynamic" ? 0 : std::stoll(onnx_batch);
      o.opset = opset;
      o.fold_batchnorm = !keep_bn;
      const OnnxExport e = checkpoint_to_onnx(path, o);
      write_onnx_model(e.model, onnx_path);
      std::cout << describe_export(e, onnx_path);
      return 0;
    }
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
