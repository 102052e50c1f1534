// Whole-file reads and writes through zlib, so callers (and tests) never include zlib.h.
// Trap: read_file_bytes decompresses any gzip stream transparently, whatever the file's name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace cnn {

// The (decompressed, if gzip) contents of a file. cnn::Error naming the file when it can't be read.
std::vector<uint8_t> read_file_bytes(const std::string& path);
// Writes `bytes` gzip-compressed (level 6).
void write_gzip_file(const std::string& path, const void* data, size_t bytes);
// Writes `bytes` as they are.
void write_file_bytes(const std::string& path, const void* data, size_t bytes);

}  // namespace cnn
