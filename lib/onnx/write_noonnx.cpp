// Stand-in for write_onnx.cpp in a build without the ONNX library: every call says so.
#include "onnx/write.h"

#include "core/error.h"

namespace cnn {

bool onnx_export_built() { return false; }

std::string onnx_missing_message() {
  return "this build has no ONNX export: it was configured without Debian's ONNX library (CNN_WITH_ONNX=OFF; "
         "install libonnx-dev and libprotobuf-dev and configure again)";
}

void write_onnx_model(const OnnxModel&, const std::string& path) {
  CNN_THROW("cannot write '{}': {}", path, onnx_missing_message());
}

OnnxFileSummary check_onnx_file(const std::string& path) { CNN_THROW("cannot check '{}': {}", path, onnx_missing_message()); }

}  // namespace cnn
