// Helpers of the ONNX end-to-end tests: a bundled model trained for two steps on synthetic images
// (low learning rate and batchnorm momentum 1, so the probabilities stay away from 0 and 1 and a
// comparison can fail, and batchnorm's running statistics are the trained ones), exported with the real
// cnn-ckpt, and our CPU forward on the same images (what cnn-eval --predict computes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "app/ckpt_util.h"

namespace cnn::test::onnx_e2e {

// models/<name>.yaml (or `name` itself when it ends in .yaml) trained for 2 steps of 4 synthetic
// images on the CPU into run_dir, with the large models narrowed (ckpt::narrowing) and `sets` added.
ckpt::Finished train_briefly(const std::string& name, const std::string& run_dir,
                             const std::vector<std::string>& sets = {});
// cnn-ckpt export RUN -o out <flags>.
ckpt::Finished export_onnx(const std::string& run_dir, const std::string& out, const std::vector<std::string>& flags = {});
// `/usr/bin/python3 -c 'import onnx; onnx.checker.check_model(..., full_check=True)'`; exit 3 when
// python3-onnx is missing.
ckpt::Finished python_onnx_check(const std::string& path);

// n images (n, c, h, w) of uint8 values drawn from `seed`.
std::vector<uint8_t> random_images(int64_t n, int64_t c, int64_t h, int64_t w, uint64_t seed);
// Softmax probabilities (n, K) of our CPU forward through cnn-eval's Predictor (centre crop).
std::vector<float> our_probabilities(const std::string& run_dir, const std::vector<uint8_t>& images, int64_t n);
// A numpy .npy file (format 1.0, C order) of uint8 or float32 values with `shape`.
void write_npy(const std::string& path, const std::vector<uint8_t>& values, const std::vector<int64_t>& shape);
void write_npy(const std::string& path, const std::vector<float>& values, const std::vector<int64_t>& shape);

// The largest probability in `probs` (n, K) of each row, the smallest of them: below ~0.999 the
// rows are not saturated, so an ONNX model that differs from ours shows in them.
float smallest_top_probability(const std::vector<float>& probs, int64_t k);

}  // namespace cnn::test::onnx_e2e
