// Whole-file reads and writes for the data readers (zlib behind them, so callers and tests never
// include zlib.h). Every read opens the path non-blocking and refuses anything but a regular file,
// so a FIFO or a device never blocks or streams forever, and caps the bytes it returns.
// Trap: read_file_bytes decompresses any gzip stream (magic 1f 8b) whatever the file's name, and a
// gzip stream that is cut short or fails its CRC-32 / length check is an error, never a short read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "data/data_limits.h"

namespace cnn {

// The contents of a file, decompressed when it is gzip (concatenated members are joined, as gzip -d
// does). cnn::Error naming the file when: it can't be opened (a missing relative path also names
// the absolute path it was looked for at), it is not a regular file (directory, FIFO, device,
// socket), it holds more than `limit` bytes (after decompression), or its gzip stream is corrupt,
// truncated (also at a clean row boundary), fails its CRC-32 or length check, or is followed by
// bytes that are not another gzip member; the message gives the compressed byte offset.
std::vector<uint8_t> read_file_bytes(const std::string& path, int64_t limit = kMaxDataFileBytes);
// The first min(n, size) bytes of what read_file_bytes would return, reading no more of the file
// than they need (headers checked before the rest is sized). Only the part read is checked.
std::vector<uint8_t> read_file_head(const std::string& path, int64_t n);
// The bytes of a regular file as they are (no decompression): image files. At most limit + 1
// bytes: a result longer than `limit` means the file is too large (the caller says so). Throws
// like read_file_bytes for files that can't be opened or are not regular files.
std::vector<uint8_t> read_raw_file(const std::string& path, int64_t limit);
// read_file_bytes on bytes in memory; `name` stands for the file in messages (fuzzers, tests).
std::vector<uint8_t> decode_file_bytes(const std::string& name, const uint8_t* data, size_t size,
                                       int64_t limit = kMaxDataFileBytes);
// For messages about a path that isn't there: the absolute path it was looked for at, and, for a
// relative path, that it is relative to the working directory.
std::string where_looked(const std::string& path);

// "zlib 1.2.13": what inflates gzip data in this build (the start-up breakdown names it).
const char* gzip_inflater();

// Writes `bytes` gzip-compressed (level 6).
void write_gzip_file(const std::string& path, const void* data, size_t bytes);
// Writes `bytes` as they are.
void write_file_bytes(const std::string& path, const void* data, size_t bytes);

}  // namespace cnn
