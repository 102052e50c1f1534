// The decoded-data cache: the splits a file-based source decoded to (fer2013-csv, idx), kept on
// disk under a key made of the format, the settings the decoding depends on and a hash of every
// source file's bytes as they are on disk, so a later run with the same files reads the decoded
// splits instead of inflating gzip or parsing CSV again. Any change to a source file's bytes gives
// another key: there is nothing to invalidate by hand. An entry is one file,
// <dir>/<16 hex digits of the key's hash>.bin, written to a temporary name and renamed (a reader never
// sees half an entry); it holds the key itself, checked on read, and a hash of its contents, so a
// damaged or foreign file is a miss, never data. CNN_DATA_CACHE names the directory, or `none`:
// off (default $XDG_CACHE_HOME/cnn-train/data, else ~/.cache/cnn-train/data).
// Trap: the cache holds the source's splits before val is carved and before images are converted
// to the model's input: load_dataset does both after a hit as after a read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "data/dataset.h"

namespace cnn {

// The cache directory from CNN_DATA_CACHE (read at each call), or "" when it is `none`.
std::string data_cache_dir();

// A 64-bit hash of a byte stream, four independent lanes (about four times a one-lane hash's
// speed); update() takes the stream in pieces of any size.
struct DataCacheHash {
  explicit DataCacheHash(uint64_t seed);
  void update(const void* data, size_t n);
  uint64_t digest() const;
  uint64_t a, b, c, d, total = 0;
  uint8_t tail[32] = {};
  size_t held = 0;

private:
  void block(const uint8_t* p);
};
uint64_t data_cache_hash(const void* data, size_t n, uint64_t seed);
// A file's size and hash (DataCacheHash, seed 1) read through one 1 MiB buffer; false when it
// cannot be read.
bool data_cache_hash_file(const std::string& path, uint64_t& size, uint64_t& hash);

// The entry for `key` in `dir`; nullopt when there is none or it is not a whole entry of this key
// (`why` says which, for the log).
std::optional<DataSplits> data_cache_read(const std::string& dir, const std::string& key, std::string& why);
// Writes the entry; false when it could not (`why` says why; the run goes on without it).
bool data_cache_write(const std::string& dir, const std::string& key, const DataSplits& splits, std::string& why);
// The entry file of `key` in `dir`.
std::string data_cache_file(const std::string& dir, const std::string& key);

}  // namespace cnn
