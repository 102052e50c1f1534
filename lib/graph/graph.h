// The network as a DAG of layers wired by name: built from a ModelSpec, topologically ordered,
// shape-inferred, with a flat parameter layout. Owns no activation or parameter memory (the
// Executor does), so one Graph can be validated without allocating anything.
// Trap: the layer keys were checked when the spec was parsed; Graph::build checks what needs
// shapes (inputs that exist, shapes that fit, one class score per class). It also holds the model
// input, every layer output and every parameter to the per-tensor cap (core/checked.h), so a
// layer's infer_shape only ever sees shapes whose dimension products fit.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "config/model_spec.h"
#include "layers/layer.h"
#include "layers/registry.h"

namespace cnn {

struct GraphNode {
  std::unique_ptr<Layer> layer;
  std::vector<int> inputs;     // node indices; kModelInput for the model's input
  std::vector<int> consumers;  // nodes reading this node's output
  Shape in_shape0;             // per-sample shape of the first input
  Shape out_shape;             // per sample
  std::vector<int> params;     // indices into Graph::params() of this layer's tensors
  // Activation fusion (Graph::fuse_activations): an activation node with fused_into >= 0 does no
  // work and shares that producer's output and gradient memory; the producer has fused_act.
  int fused_into = -1;
  int fused_act = -1;
  // Conv bias folding (Graph::fold_conv_biases): the batchnorm node this conv2d's bias is folded into.
  int bias_folded_into = -1;
};

// One named tensor in a flat buffer: trainable ones live in "params" (with grads of the same
// layout), buffers (running statistics) in "buffers".
struct ParamEntry {
  std::string name;  // "conv1.weight"
  Shape shape;
  int64_t offset = 0;  // in floats, into the params or buffers flat buffer
  bool trainable = true;
  bool decay = true;
  InitSpec init;
  int node = 0;
};

class Graph {
public:
  static constexpr int kModelInput = -1;
  // Offsets in the flat buffers are aligned to this many floats (64 bytes).
  static constexpr int64_t kAlign = 16;
  // The most class scores the final layer may output: evaluation keeps a K x K confusion matrix of
  // 64-bit counts (512 MiB at the cap) and one name per class.
  static constexpr int64_t kMaxClasses = int64_t{1} << 13;

  static std::unique_ptr<Graph> build(const ModelSpec& spec, const LayerRegistry& registry);
  static std::unique_ptr<Graph> build(const ModelSpec& spec);  // built-in registry

  // Per-sample network input: (C, crop, crop) when the data has a random crop, else (C, H, W).
  const Shape& input_shape() const { return m_input_shape; }
  const Shape& output_shape() const { return m_nodes.back().out_shape; }
  int64_t num_classes() const { return m_nodes.back().out_shape[0]; }
  const std::vector<std::string>& class_names() const { return m_class_names; }
  // Names found by the data (image-folder class folders) when the model file gives none;
  // their count must equal the final layer's width.
  void set_class_names(std::vector<std::string> names);

  int size() const { return static_cast<int>(m_nodes.size()); }
  GraphNode& node(int i) { return m_nodes[static_cast<size_t>(i)]; }
  const GraphNode& node(int i) const { return m_nodes[static_cast<size_t>(i)]; }

  const std::vector<ParamEntry>& params() const { return m_params; }
  int64_t params_size() const { return m_params_size; }    // floats, including alignment gaps
  int64_t buffers_size() const { return m_buffers_size; }
  int64_t trainable_count() const;                          // parameters proper (no gaps)
  int64_t buffer_count() const;

  // Per-sample FLOPs of forward and of a training step (forward + backward).
  double forward_flops() const;
  double training_flops() const;

  // Resolves each layer's dtype and backend for `device` (throws when an explicit backend can't be
  // honoured); returns one log line per layer that `auto` placed, in order. Then redoes the
  // activation fusion. A layer whose precision stores another dtype (bf16) gets it where one of
  // its backends on the device supports it, else stays f32: precision_notes() says which.
  std::vector<std::string> choose_backends(Device device);
  // After choose_backends: one line per layer kept in f32 against its precision, and one per
  // planned cast edge ("input -> conv1: f32 NCHW -> bf16 NHWC").
  const std::vector<std::string>& precision_notes() const { return m_precision_notes; }
  // Whether node reads input `slot` through a cast: its dtype differs from the producer's (a fused
  // activation reads nothing). The memory plan and the precision notes both ask this.
  bool casts_input(int node, int slot) const {
    const GraphNode& n = m_nodes[static_cast<size_t>(node)];
    return n.fused_into < 0 && dtype_of(n.inputs[static_cast<size_t>(slot)]) != n.layer->dtype();
  }
  // The dtype of a node's output (f32 for kModelInput).
  DType dtype_of(int node) const { return node == kModelInput ? DType::f32 : m_nodes[static_cast<size_t>(node)].layer->dtype(); }

  // Fuses each activation (relu, leaky_relu/elu with alpha > 0, sigmoid, tanh) into the batchnorm,
  // dense or FP32 conv2d layer that feeds only it, where both run our cpu/cuda kernels, or the
  // activation does and the producer applies it with them on any backend of its device
  // (Layer::fuses_on_any_backend; train.fuse_activations; build and choose_backends call it). false undoes every fusion. Returns the fused pairs' count.
  int fuse_activations(bool enabled);
  bool fusion_enabled() const { return m_fuse; }
  // Folds the bias of each conv2d whose output only a batchnorm reads into that batchnorm's mean
  // (ops/batchnorm.h "Mean offset"): the conv's forward runs without it, the batchnorm gets it as
  // its mean_offset (its outputs, gradients and running statistics mean what they did). Only for a
  // conv whose precision is not fp32 (fp32 stays bit for bit as without), unless include_fp32 (for
  // tests); a batchnorm that asks for backend cudnn is left alone. train.fold_conv_bias; build calls
  // it; false undoes every fold. Returns the folded pairs' count.
  int fold_conv_biases(bool enabled, bool include_fp32 = false);
  // "conv1 -> bn1, conv2 -> bn2": the folded pairs (empty: none).
  std::string folded_bias_pairs() const;
  // tf32 layers' activation layout (train.tf32_layout: "auto", "nchw" or "nhwc"; set by build, read by
  // choose_backends): nhwc stores them as f32cl (channels-last FP32); auto (the default) does so on a
  // GPU where every tf32 layer has an f32cl implementation, else stays NCHW (noted).
  void set_tf32_layout(const std::string& layout);
  const std::string& tf32_layout() const { return m_tf32_layout; }
  // Whether a training executor packs the 16-bit weight copies of every layer once a step
  // (graph/weight_packs.h; train.prepack_weights, set by build). Read when an executor is built.
  bool prepack_weights() const { return m_prepack; }
  void set_prepack_weights(bool on) { m_prepack = on; }
  // "bn1+relu1" for a producer with a fused activation, else the layer's name.
  std::string display_name(int node) const;

private:
  Shape m_input_shape;
  std::vector<std::string> m_class_names;
  std::vector<GraphNode> m_nodes;
  std::vector<ParamEntry> m_params;
  int64_t m_params_size = 0;
  int64_t m_buffers_size = 0;
  bool m_fuse = true;
  bool m_prepack = true;
  std::string m_tf32_layout = "auto";
  std::vector<std::string> m_precision_notes;
};

// Network input per sample for a spec (see Graph::input_shape).
Shape network_input_shape(const ModelSpec& spec);

}  // namespace cnn
