// An OnnxModel (lower.h) as an ONNX file, through Debian's ONNX library (its protobuf classes,
// checker and shape inference): write_onnx.cpp; without the library (CNN_WITH_ONNX off)
// write_noonnx.cpp stands in and every call throws an error that says so.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "onnx/lower.h"

namespace cnn {

// Whether this build has the ONNX library (CNN_WITH_ONNX).
bool onnx_export_built();
// What the error of a build without it says.
std::string onnx_missing_message();

// Builds the ModelProto, runs the ONNX checker and strict shape inference on it, and writes it
// (a temporary file renamed over `path`). Throws cnn::Error naming the problem.
void write_onnx_model(const OnnxModel& model, const std::string& path);

// What an ONNX file holds, as read back by the library after its checker passed it.
struct OnnxFileSummary {
  int64_t ir_version = 0, opset = 0;
  std::string producer;
  std::vector<std::string> op_types;   // node order
  std::vector<int64_t> input_dims;     // 0: dynamic
  std::vector<int64_t> output_dims;    // 0: dynamic
  std::map<std::string, std::string> metadata;
};
// Parses `path` and runs the checker (and strict shape inference); throws when either refuses it.
OnnxFileSummary check_onnx_file(const std::string& path);

}  // namespace cnn
