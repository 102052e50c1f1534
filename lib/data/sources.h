// The readers behind load_dataset, one per data.format. Each returns the splits the source has,
// at the source's own image size (image-folder: already at the model input), without val carving
// or fingerprint: load_dataset does those. Trap: skip_bad counts into DataSplits::bad_skipped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/model_spec.h"
#include "data/dataset.h"

namespace cnn {

// fer2013-csv: header "emotion,pixels,Usage" (or "emotion,pixels": all rows train); 48x48 gray.
// Errors are "path:LINE: field 'x' (column C): what is wrong".
// A missing file's error says where it was looked for and points to datasets/fer2013/README.md.
DataSplits load_fer2013_csv(const std::string& path, int64_t num_classes, bool skip_bad);
// The same on the file's (decompressed) contents; `path` names the file in messages.
DataSplits parse_fer2013_csv(const std::string& path, const uint8_t* data, size_t size, int64_t num_classes,
                             bool skip_bad);
// One CSV row (no newline): "emotion,p0 p1 ...,usage"; usage "" writes the two-column variant.
std::string fer2013_csv_row(int64_t emotion, const uint8_t* pixels,  // (n)
                            int64_t n, const std::string& usage);

// idx: {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] in `dir`; t10k is the test split.
// The header is read and checked (overflow-checked sizes under the limits of data_limits.h) before
// the rest of a file is read; errors name the file and the header field.
DataSplits load_idx(const std::string& dir);
// The four files load_idx would read (each name or name.gz), or none when one is missing.
std::vector<std::string> idx_source_files(const std::string& dir);
// One idx file's contents (already decompressed): images (magic 0x803, dims {n, h, w}) when
// `images`, else labels (0x801, dims {n}). Returns the values after the header; `path` names the
// file in messages.
std::vector<uint8_t> parse_idx(const std::string& path, const uint8_t* data, size_t size, bool images,
                               std::vector<int64_t>& dims);
// One idx file: images (n, h, w) uint8 (labels: magic 0x801, pass h = w = 0).
std::vector<uint8_t> idx_file_bytes(const std::vector<uint8_t>& values, int64_t n, int64_t h, int64_t w);

// image-folder: dir/{train,val,test}/<class>/<image>, read through image_io.h and resized to `input`.
// Without OpenCV in the build this throws a ConfigError.
DataSplits load_image_folder(const DataSpec& spec, const InputSpec& input,
                             const std::vector<std::string>& classes);

}  // namespace cnn
