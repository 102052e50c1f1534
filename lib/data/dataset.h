// A decoded dataset in memory (uint8 pixels at the model's input size) and the loader that
// dispatches on data.format. Trap: a source without a val split gets one carved out of train
// (stratified, fixed seed), so train here is smaller than the source's training set.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/model_spec.h"

namespace cnn {

struct Dataset {
  int64_t channels = 0, height = 0, width = 0;
  std::vector<uint8_t> pixels;  // (N, C, H, W), 0..255
  std::vector<int32_t> labels;  // (N), in [0, classes)

  int64_t size() const { return static_cast<int64_t>(labels.size()); }
  int64_t sample_bytes() const { return channels * height * width; }
  const uint8_t* sample(int64_t i) const { return pixels.data() + i * sample_bytes(); }  // (C, H, W)
  // The samples at `indices`, in that order.
  Dataset subset(const std::vector<int64_t>& indices) const;
};

struct DataSplits {
  Dataset train, val, test;
  std::vector<std::string> class_names;
  int64_t bad_skipped = 0;         // rows/files skipped with on_bad_row: skip
  std::vector<std::string> notes;  // source, counts, how val was carved
  std::string fingerprint;         // "train=N:hash;val=N:hash;test=N:hash" (see dataset_fingerprint)
};

// Loads spec.path as spec.format (fer2013-csv | idx | image-folder | synthetic), resized to `input`.
// `classes` may be empty (names then come from the source, or default ones). Carves val when the
// source has none, and fills notes and fingerprint.
DataSplits load_dataset(const DataSpec& spec, const InputSpec& input, const std::vector<std::string>& classes);
// The same for a whole model file: a ConfigError about a key (input.channels, data.color, ...)
// names the model file, which DataSpec and InputSpec alone don't know.
DataSplits load_dataset(const ModelSpec& model, const std::vector<std::string>& classes);

// Moves round(fraction * N) samples of train into val, stratified by class: each class gives
// floor(fraction * n_c) and the remainder goes to the classes with the largest fractional parts.
// The choice within a class is a Philox permutation of (seed, RngStream::split); both parts keep
// the source order. Adds a note.
void carve_val(DataSplits& splits, double fraction, uint64_t seed);

// Per-class counts; labels outside [0, num_classes) are an error.
std::vector<int64_t> class_histogram(const Dataset& d, int64_t num_classes);
// A fixed-width table: one row per class, columns train / val / test, and a total row.
std::string class_histogram_table(const DataSplits& splits);
// "train=28709:1a2b3c4d5e6f7a8b;val=...;test=..." hashing labels and pixels of each split.
std::string dataset_fingerprint(const DataSplits& splits);

// The seven FER2013 emotions in label order.
const std::vector<std::string>& fer2013_class_names();

// Bilinear resize (pixel centres aligned, like OpenCV INTER_LINEAR) and channel conversion of one
// image: 1 -> 3 replicates, 3 -> 1 takes luma (0.299 R + 0.587 G + 0.114 B).
void convert_image(const uint8_t* src,  // (sc, sh, sw)
                   int64_t sc, int64_t sh, int64_t sw,
                   uint8_t* dst,  // (dc, dh, dw)
                   int64_t dc, int64_t dh, int64_t dw);
// Every image of `d` converted to (channels, height, width); a no-op when it already is.
void convert_dataset(Dataset& d, int64_t channels, int64_t height, int64_t width);

}  // namespace cnn
