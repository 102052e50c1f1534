// `cnn-ckpt export`: a checkpoint as an ONNX model that needs nothing else. It takes images of the
// data input size as float32 pixel values 0..255 (N, C, H, W; planes gray or R, G, B), crops the
// centre when the network was trained on crops, normalises with the run's statistics and returns
// softmax probabilities (N, K); the class names, the normalisation and the resolved config travel
// in metadata_props. Trap: eval.ten_crop's mean over ten crops is not in the model (the centre
// crop is): export says so rather than pretend the numbers equal a ten-crop evaluation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "onnx/lower.h"

namespace cnn {

struct OnnxExport {
  OnnxModel model;
  std::string checkpoint;          // the file read
  std::vector<std::string> notes;  // what a user should know about the model ("eval.ten_crop ...")
  int folded_batchnorms = 0, kept_batchnorms = 0;
};

// Reads and verifies the checkpoint (a file, or a run directory: its best checkpoint, else its last,
// as cnn-eval picks), rebuilds its
// graph and lowers it with the checkpoint's weights. Throws cnn::Error naming the checkpoint, or
// the layer that has no ONNX form.
OnnxExport checkpoint_to_onnx(const std::string& run_dir_or_ckpt, const OnnxLowerOptions& options);

// "wrote model.onnx: opset 17, input [batch, 1, 48, 48] ..." for the command's output.
std::string describe_export(const OnnxExport& e, const std::string& path);

}  // namespace cnn
