// The safetensors file format (the one Python's `safetensors` loads): u64 LE header length N,
// N bytes of JSON {name: {dtype, shape, data_offsets}, "__metadata__": {str: str}}, then raw
// little-endian data. Trap: files are hostile input; the reader validates the whole header
// (types, overflow, exact coverage of the data section) before it touches or allocates for data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace cnn {

// Element types of the format: core/dtype.h's DType (dtype_size there). Sub-byte types (F4, F6_*)
// are not supported and read as unknown.
const char* dtype_name(DType t);             // "F32", "BF16", "BOOL", ...
DType parse_dtype(const std::string& name);  // throws cnn::Error listing the known names

// Where a tensor lives in a file; offsets are relative to the start of the data section.
struct TensorInfo {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;  // [] is a scalar (one element)
  uint64_t begin = 0;
  uint64_t end = 0;
  uint64_t bytes() const { return end - begin; }
  int64_t numel() const;
};

// Header lengths above this are rejected before anything is allocated (the reference's limit).
inline constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// JSON nesting of the header: deeper than a valid header needs (object > entry > shape array),
// plus slack. Parsed with this bound, a deep header is an error, not a stack overflow.
inline constexpr int kMaxHeaderJsonDepth = 8;
// Tensors one header may declare. Far above any real training state: our largest model (kMaxLayers
// = 4096 layers, batchnorm's 4 tensors each, Adam's 2 slots per parameter) writes at most 2^15, a
// 1000-layer network with Adam ~5000. The entries are counted in a first linear pass that builds
// nothing, so a header over the cap is refused, naming the count, before any entry is made: 1.5M
// zero-size entries fit in a 10^8-byte header, and took 22 s and 3 GB (inspect --json died of
// bad_alloc under a 4 GB address-space cap).
inline constexpr size_t kMaxHeaderTensors = size_t(1) << 16;
// Entries of the header's __metadata__: a checksum per tensor and cnn-train's own keys, with the
// same slack (each entry costs ~100 bytes in memory for 4 bytes of text like "a":"",).
inline constexpr size_t kMaxMetadataEntries = size_t(1) << 17;
// JSON values the header may hold in all (each tensor takes 6 plus its rank, each metadata entry
// one): kMaxHeaderTensors tensors of rank 50 and a full metadata object fit. It bounds what any
// shape or unknown field can make the parser build (a value takes up to ~60 bytes in memory for 3
// of text, so 10^8 bytes of `[],` would take 2 GB).
inline constexpr size_t kMaxHeaderJsonValues = size_t(1) << 22;
// Key of the string->string metadata object in the header.
inline constexpr const char* kMetadataKey = "__metadata__";

// Collects tensors (copied) and metadata, then serializes them: header padded with spaces to a
// multiple of 8 bytes, tensors in add() order, contiguous, no gaps.
class SafetensorsWriter {
public:
  // `bytes` must equal numel(shape) * dtype_size(dtype). Names must be unique, non-empty UTF-8.
  void add(const std::string& name, DType dtype, const std::vector<int64_t>& shape, const void* data,
           size_t bytes);
  void add_f32(const std::string& name, const std::vector<int64_t>& shape, const float* data);  // shape's numel floats
  void set_metadata(const std::string& key, const std::string& value);  // replaces an earlier value

  const std::map<std::string, std::string>& metadata() const { return m_metadata; }
  std::vector<std::string> names() const;  // add() order
  // Bytes of the tensor called `name` as added (throws when absent).
  const std::vector<uint8_t>& tensor_bytes(const std::string& name) const;

  // The whole file in memory.
  std::string serialize() const;
  // Writes "<path>.tmp-<pid>" in the same directory, fsyncs it, renames it over `path` and fsyncs
  // the directory. On failure the temp file is removed, an existing file at `path` is untouched,
  // and cnn::Error names the path and the system's reason.
  void write_atomic(const std::string& path) const;

private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::string header() const;  // length prefix + padded JSON
  std::vector<Entry> m_entries;
  std::map<std::string, size_t> m_index;
  std::map<std::string, std::string> m_metadata;
};

// A validated safetensors file held in memory.
class SafetensorsFile {
public:
  // Checks the size before reading, validates the header, then reads the data section.
  static SafetensorsFile open(const std::string& path);
  // `source` names the bytes in error messages.
  static SafetensorsFile parse(const std::string& bytes, const std::string& source = "<memory>");

  const std::string& source() const { return m_source; }
  const std::map<std::string, std::string>& metadata() const { return m_metadata; }
  // Names in file order (by data offset).
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return m_index.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;  // throws when absent
  const std::vector<TensorInfo>& tensors() const { return m_tensors; }

  // The raw little-endian bytes of a tensor.
  std::vector<uint8_t> read_bytes(const std::string& name) const;
  const uint8_t* data(const std::string& name) const;  // points into the held data section
  // The tensor as floats: F32 as is; F64, F16 and BF16 converted. Other dtypes throw.
  std::vector<float> read_f32(const std::string& name) const;
  size_t data_size() const { return m_data.size(); }

private:
  static SafetensorsFile from_header(const std::string& header, uint64_t data_size, const std::string& source);
  std::string m_source;
  std::map<std::string, std::string> m_metadata;
  std::vector<TensorInfo> m_tensors;  // sorted by offset
  std::map<std::string, size_t> m_index;
  std::vector<uint8_t> m_data;  // the data section
};

// IEEE half and bfloat16 to float (exact).
float half_to_float(uint16_t h);
float bf16_to_float(uint16_t b);

}  // namespace cnn
