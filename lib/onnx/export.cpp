// A checkpoint as an ONNX model (see export.h): the checkpoint's config and weights read without
// building an executor (a 500 MB model needs its weights once, not twice), then lower_to_onnx.
#include "onnx/export.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_state.h"
#include "core/error.h"
#include "eval/predict.h"

namespace cnn {
namespace {

// The run's normalisation: the one the checkpoint records, else the config's explicit values.
Normalization export_normalization(const LoadedCheckpoint& c, const ModelSpec& spec) {
  if (!c.meta.normalization.empty()) {
    Normalization n;
    n.mean = c.meta.normalization.at("mean").get<std::vector<float>>();
    n.std = c.meta.normalization.at("std").get<std::vector<float>>();
    return n;
  }
  if (spec.data.normalize.automatic)
    CNN_THROW("cannot export '{}': it does not record its normalisation (it was written before checkpoints did) "
              "and its config says data.normalize: auto, so the statistics are not in it",
              c.path);
  return training_normalization(spec, nullptr);
}

std::string dims_text(const std::vector<int64_t>& dims) {
  std::vector<std::string> parts;
  for (int64_t d : dims) parts.push_back(d == 0 ? "batch" : std::to_string(d));
  return fmt::format("[{}]", fmt::join(parts, ", "));
}

}  // namespace

OnnxExport checkpoint_to_onnx(const std::string& run_dir_or_ckpt, const OnnxLowerOptions& options) {
  OnnxExport e;
  e.checkpoint = pick_eval_checkpoint(run_dir_or_ckpt);
  const LoadedCheckpoint c = read_checkpoint(e.checkpoint);
  const ModelSpec spec = validated_checkpoint_spec(c.meta.config_yaml, c.path);
  const std::unique_ptr<Graph> graph = Graph::build(spec);
  const Graph& g = *graph;

  OnnxInputSpec in;
  in.channels = spec.input.channels;
  in.data_height = spec.input.height;
  in.data_width = spec.input.width;
  in.norm = export_normalization(c, spec);
  const ParamReader read = [&](int index) {
    const ParamEntry& p = g.params()[size_t(index)];
    const TensorInfo& t = c.file.info(p.name);  // throws naming the tensor when absent
    if (Shape(t.shape) != p.shape)
      CNN_THROW("cannot export '{}': tensor '{}' has shape {} but the model needs {}", c.path, p.name,
                Shape(t.shape).to_string(), p.shape.to_string());
    return c.file.read_f32(p.name);
  };
  e.model = lower_to_onnx(g, read, in, options);

  int batchnorms = 0;
  for (int i = 0; i < g.size(); ++i) batchnorms += g.node(i).layer->type() == "batchnorm";
  for (const OnnxNode& n : e.model.nodes) e.kept_batchnorms += n.op_type == "BatchNormalization";
  e.folded_batchnorms = batchnorms - e.kept_batchnorms;

  const bool gray = spec.data.color == "gray" || (spec.data.color == "auto" && spec.input.channels == 1);
  const std::string crops = describe_eval_crops(spec, false);
  if (spec.eval.ten_crop)
    e.notes.push_back(fmt::format("eval.ten_crop is on: cnn-eval averages ten crops, the exported model takes the "
                                  "{} (the mean over ten crops is not part of it)",
                                  crops));
  OnnxModel& m = e.model;
  m.graph_name = spec.name;
  m.doc = fmt::format(
      "cnn-train model '{}'. Input '{}': float32 (N, {}, {}, {}) pixel values 0..255 ({}); the model takes the {}, "
      "normalises it and returns softmax probabilities '{}' (N, {}) over the classes in metadata 'classes'.",
      spec.name, m.input_name, in.channels, in.data_height, in.data_width,
      gray ? "gray" : in.channels == 3 ? "planes R, G, B" : "one plane per channel", crops, m.output_name,
      g.num_classes());
  const nlohmann::json norm{{"mean", in.norm.mean}, {"std", in.norm.std}};
  m.metadata = {{"classes", nlohmann::json(g.class_names()).dump()},
                {"input", fmt::format("float32 (N, C, H, W) = {}, pixel values 0..255, {}", dims_text(m.input_dims),
                                      gray ? "gray" : "planes R, G, B")},
                {"preprocess", crops},
                {"normalization", norm.dump()},
                {"batchnorm", options.fold_batchnorm ? "folded into the preceding conv2d or dense where it alone "
                                                       "reads it, kept as BatchNormalization elsewhere"
                                                     : "kept as BatchNormalization"},
                {"checkpoint", e.checkpoint},
                {"step", std::to_string(c.meta.step)},
                {"config", c.meta.config_yaml}};
  return e;
}

std::string describe_export(const OnnxExport& e, const std::string& path) {
  const OnnxModel& m = e.model;
  std::string s = fmt::format(
      "wrote {}: ONNX opset {}, {} nodes, input '{}' {} (pixels 0..255), output '{}' {} (probabilities); "
      "{} batchnorm(s) folded, {} kept; passed the ONNX checker\n",
      path, m.opset, m.nodes.size(), m.input_name, dims_text(m.input_dims), m.output_name, dims_text(m.output_dims),
      e.folded_batchnorms, e.kept_batchnorms);
  for (const std::string& n : e.notes) s += "note: " + n + "\n";
  return s;
}

}  // namespace cnn
