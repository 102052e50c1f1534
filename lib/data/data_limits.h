// The size limits of the data readers and the overflow-checked arithmetic they size buffers with.
// Trap: every count read from a file (IDX dimensions, image headers, row counts) goes through
// checked_product before anything is allocated from it; a plain `a * b` in size_t wraps silently.
// (A local stand-in until lib/core has one checked-arithmetic header for shapes and sizes.)
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>

namespace cnn {

// Bytes of one data file after decompression (FER2013's CSV is 0.3 GB, Fashion-MNIST's largest
// idx file 47 MB). A gzip bomb or an oversized file stops here, before memory runs out.
constexpr int64_t kMaxDataFileBytes = int64_t{1} << 30;
// Bytes of one image file in an image folder (or given to --predict).
constexpr int64_t kMaxImageFileBytes = int64_t{256} << 20;
// Decoded pixels of one image (width x height), checked from the file's header before decoding:
// 64 megapixels (8192 x 8192) is 192 MiB as RGB; a PNG of 875 KB can declare 900 megapixels.
constexpr int64_t kMaxImagePixels = int64_t{64} << 20;
// Elements (bytes: pixels are uint8) of one split's pixel tensor (N, C, H, W) in memory.
constexpr int64_t kMaxDataElements = int64_t{1} << 34;

// a * b * ... when every factor is >= 0 and the product fits in int64_t; nullopt otherwise.
inline std::optional<int64_t> checked_product(std::initializer_list<int64_t> factors) {
  int64_t p = 1;
  for (int64_t f : factors) {
    if (f < 0 || __builtin_mul_overflow(p, f, &p)) return std::nullopt;
  }
  return p;
}

}  // namespace cnn
