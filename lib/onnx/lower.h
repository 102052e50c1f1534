// Our graph as ONNX nodes, in plain structs (no ONNX library here: write_onnx.cpp turns an
// OnnxModel into the library's ModelProto). lower_to_onnx maps every layer type to ONNX ops, with
// the centre crop and the input normalisation in front and a Softmax behind.
// Trap: a layer type or a layer key this file does not know is an error naming the layer, never
// skipped: an exported model that computes something else is worse than none.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "data/normalize.h"
#include "graph/graph.h"

namespace cnn {

// The opsets the export writes: every op it emits has one form across them (Softmax, Slice,
// BatchNormalization and Flatten changed before 13), and libonnx 1.12 knows up to 17.
inline constexpr int kOnnxMinOpset = 13;
inline constexpr int kOnnxMaxOpset = 17;

struct OnnxAttribute {
  enum class Kind { integer, real, integers };
  std::string name;
  Kind kind = Kind::integer;
  int64_t i = 0;
  float f = 0;
  std::vector<int64_t> ints;
};

struct OnnxNode {
  std::string op_type, name;
  std::vector<std::string> inputs, outputs;
  std::vector<OnnxAttribute> attributes;
};

// A constant: floats, or int64 values (Slice's starts/ends/axes).
struct OnnxInitializer {
  std::string name;
  std::vector<int64_t> dims;
  std::vector<float> floats;
  std::vector<int64_t> int64s;
  bool is_int64 = false;
};

struct OnnxModel {
  std::string graph_name, doc;
  int opset = kOnnxMaxOpset;
  std::string input_name = "input", output_name = "probabilities";
  std::vector<int64_t> input_dims, output_dims;  // first dim 0: dynamic ("batch")
  std::vector<OnnxNode> nodes;                   // topological order
  std::vector<OnnxInitializer> initializers;
  std::vector<std::pair<std::string, std::string>> metadata;  // metadata_props
};

struct OnnxLowerOptions {
  int64_t batch = 0;          // 0: dynamic batch
  int opset = kOnnxMaxOpset;
  bool fold_batchnorm = true; // into the conv2d or dense layer that feeds only it
};

// What the model takes and does around the network: images of the data input size
// (data_height x data_width, the size `cnn-eval --predict` resizes to), the centre crop to the
// network input when that is smaller, then (x - 255 mean) / (255 std) per channel.
struct OnnxInputSpec {
  int64_t channels = 1, data_height = 0, data_width = 0;
  Normalization norm;
};

// Float values of parameter `index` of graph.params() (PyTorch layout).
using ParamReader = std::function<std::vector<float>(int index)>;

// Throws cnn::Error naming the layer (name, type, model file:line) for anything it cannot export.
OnnxModel lower_to_onnx(const Graph& graph, const ParamReader& params, const OnnxInputSpec& input,
                        const OnnxLowerOptions& options);

}  // namespace cnn
