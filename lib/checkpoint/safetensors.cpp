// safetensors reader and writer. The reader treats every byte as hostile: sizes are checked
// against the file before anything is allocated, the header is fully validated (types, integer
// ranges, overflow, duplicate keys, exact gap-free coverage of the data section) before the
// data is read, and every problem is a cnn::Error naming the source and the tensor.
// Trap: nlohmann keeps the last of duplicate keys silently, its callback parser is quadratic in the
// number of tensors, and its DOM of a whole header takes ~20 times the text; the header's entries
// are first counted without building anything (over kMaxHeaderTensors: refused), then read one by
// one (parse_bounded_json_members), duplicates refused, values counted.
#include "checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <new>
#include <nlohmann/json.hpp>
#include <tuple>

#include "checkpoint/bounded_json.h"
#include "core/error.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; this reader copies it as is"
#endif

namespace cnn {

using json = nlohmann::json;

namespace {

struct DTypeRow {
  DType type;
  const char* name;
  size_t size;
};
constexpr DTypeRow kDTypes[] = {
    {DType::f64, "F64", 8},        {DType::f32, "F32", 4},         {DType::f16, "F16", 2},
    {DType::bf16, "BF16", 2},      {DType::f8_e4m3, "F8_E4M3", 1}, {DType::f8_e5m2, "F8_E5M2", 1},
    {DType::i64, "I64", 8},        {DType::i32, "I32", 4},         {DType::i16, "I16", 2},
    {DType::i8, "I8", 1},          {DType::u64, "U64", 8},         {DType::u32, "U32", 4},
    {DType::u16, "U16", 2},        {DType::u8, "U8", 1},           {DType::boolean, "BOOL", 1},
};

const DTypeRow* find_dtype(const std::string& name) {
  for (const auto& row : kDTypes)
    if (name == row.name) return &row;
  return nullptr;
}

std::string known_dtypes() {
  std::string out;
  for (const auto& row : kDTypes) out += (out.empty() ? "" : ", ") + std::string(row.name);
  return out;
}

// Hostile files can carry megabyte-long names and values: messages quote at most this much.
std::string clip(const std::string& s, size_t max_chars = 80) { return clip_text(s, max_chars); }
std::string excerpt(const json& v) { return clip(v.dump(-1, ' ', true, json::error_handler_t::replace), 40); }

// An integer in [0, 2^63): the only numbers a shape or an offset may hold.
bool as_index(const json& v, uint64_t& out) {
  if (v.is_number_unsigned()) {
    out = v.get<uint64_t>();
    return out <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  }
  if (v.is_number_integer()) {
    int64_t s = v.get<int64_t>();
    out = static_cast<uint64_t>(s);
    return s >= 0;
  }
  return false;
}

// Element count of a shape, or false on overflow of 63 bits (multiplied in order, like the
// reference implementation, so [2^62, 4, 0] overflows even though its product is 0).
bool checked_numel(const std::vector<int64_t>& shape, uint64_t& out) {
  out = 1;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(out, static_cast<uint64_t>(d), &out)) return false;
    if (out > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
  }
  return true;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}


std::map<std::string, std::string> parse_metadata(const json& v, const std::string& source) {
  std::map<std::string, std::string> out;
  if (v.is_null()) return out;
  if (!v.is_object())
    CNN_THROW("{}: '{}' must be an object of strings, got {}", source, kMetadataKey, v.type_name());
  if (v.size() > kMaxMetadataEntries)
    CNN_THROW("{}: '{}' has {} entries, more than the limit of {} (kMaxMetadataEntries in "
              "lib/checkpoint/safetensors.h)", source, kMetadataKey, v.size(), kMaxMetadataEntries);
  for (const auto& [key, value] : v.items()) {
    if (!value.is_string())
      CNN_THROW("{}: '{}' value of key '{}' must be a string, got {} {}", source, kMetadataKey, clip(key),
                value.type_name(), excerpt(value));
    out.emplace(key, value.get<std::string>());
  }
  return out;
}

TensorInfo parse_entry(const std::string& name, const json& v, uint64_t data_size, const std::string& source) {
  std::string where = fmt::format("{}: tensor '{}'", source, clip(name));
  if (!v.is_object())
    CNN_THROW("{}: entry must be an object with dtype, shape and data_offsets, got {}", where, v.type_name());
  auto field = [&](const char* key, bool (json::*is_type)() const noexcept, const char* expected) -> const json& {
    auto it = v.find(key);
    if (it == v.end()) CNN_THROW("{}: missing '{}'", where, key);
    if (!((*it).*is_type)()) CNN_THROW("{}: '{}' must be {}, got {} {}", where, key, expected, it->type_name(), excerpt(*it));
    return *it;
  };
  TensorInfo info;
  info.name = name;

  const std::string& dtype = field("dtype", &json::is_string, "a string")
                                 .get_ref<const std::string&>();
  const DTypeRow* row = find_dtype(dtype);
  if (!row) CNN_THROW("{}: unknown dtype '{}' (known: {})", where, clip(dtype), known_dtypes());
  info.dtype = row->type;

  const json& shape = field("shape", &json::is_array, "an array of integers");
  for (size_t i = 0; i < shape.size(); ++i) {
    uint64_t d = 0;
    if (!as_index(shape[i], d))
      CNN_THROW("{}: shape[{}] must be a non-negative integer below 2^63, got {}", where, i, excerpt(shape[i]));
    info.shape.push_back(static_cast<int64_t>(d));
  }
  uint64_t numel = 0, nbytes = 0;
  if (!checked_numel(info.shape, numel) || __builtin_mul_overflow(numel, row->size, &nbytes))
    CNN_THROW("{}: shape {} overflows: its byte size does not fit in 63 bits", where, clip(shape_string(info.shape)));

  const json& offsets = field("data_offsets", &json::is_array, "an array [begin, end]");
  if (offsets.size() != 2 || !as_index(offsets[0], info.begin) || !as_index(offsets[1], info.end))
    CNN_THROW("{}: data_offsets must be [begin, end] of two non-negative integers, got {}", where, excerpt(offsets));
  if (info.end < info.begin)
    CNN_THROW("{}: data_offsets end {} is before begin {}", where, info.end, info.begin);
  if (info.end > data_size)
    CNN_THROW("{}: data_offsets [{}, {}] run past the end of the data section ({} bytes)", where, info.begin,
              info.end, data_size);
  if (info.bytes() != nbytes)
    CNN_THROW("{}: data_offsets [{}, {}] hold {} bytes but {} {} needs {} bytes", where, info.begin, info.end,
              info.bytes(), dtype, clip(shape_string(info.shape)), nbytes);
  return info;
}

uint16_t load_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

}  // namespace

const char* dtype_name(DType t) {
  for (const auto& row : kDTypes)
    if (row.type == t) return row.name;
  return "?";
}

DType parse_dtype(const std::string& name) {
  const DTypeRow* row = find_dtype(name);
  if (!row) CNN_THROW("unknown dtype '{}' (known: {})", clip(name), known_dtypes());
  return row->type;
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

float half_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h >> 15) << 31;
  uint32_t exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ffu;
  float magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -24);  // zero or subnormal: m * 2^-24
  } else if (exponent == 31) {
    magnitude = mantissa ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else {
    uint32_t bits = ((exponent + 112) << 23) | (mantissa << 13);  // rebias 15 -> 127
    std::memcpy(&magnitude, &bits, 4);
  }
  return sign ? -magnitude : magnitude;
}

float bf16_to_float(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// ---- reader ----

SafetensorsFile SafetensorsFile::from_header(const std::string& header, uint64_t data_size,
                                             const std::string& source) {
  if (header.empty() || header[0] != '{')
    CNN_THROW("{}: header must be a JSON object starting with '{{', got {} bytes starting with 0x{:02x}", source,
              header.size(), header.empty() ? 0 : static_cast<unsigned char>(header[0]));
  const JsonLimits limits{kMaxHeaderJsonDepth, kMaxHeaderJsonValues};
  const std::string what = source + ": header";
  // First the entries are counted, building nothing (the JSON syntax and depth are checked too):
  // a header over the cap is refused before anything is made of it, whatever it holds.
  size_t declared = 0;
  parse_bounded_json_members(
      header, limits, what,
      [&](const std::string& key) {
        declared += key != kMetadataKey;
        return false;
      },
      [](const std::string&, json&&) {});
  if (declared > kMaxHeaderTensors)
    CNN_THROW("{}: header declares {} tensors, more than the limit of {} tensors per file (kMaxHeaderTensors in "
              "lib/checkpoint/safetensors.h)", source, declared, kMaxHeaderTensors);
  // Then entry by entry: no DOM of the whole header is built.
  SafetensorsFile file;
  file.m_source = source;
  file.m_tensors.reserve(declared);
  parse_bounded_json_members(
      header, limits, what, [](const std::string&) { return true; },
      [&](const std::string& key, json&& value) {
        if (key == kMetadataKey)
          file.m_metadata = parse_metadata(value, source);
        else
          file.m_tensors.push_back(parse_entry(key, value, data_size, source));
      });
  std::sort(file.m_tensors.begin(), file.m_tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  // The data section must be tiled exactly: Python's loader rejects gaps and overlaps too.
  uint64_t cursor = 0;
  const TensorInfo* previous = nullptr;
  for (const auto& t : file.m_tensors) {
    if (t.begin < cursor)
      CNN_THROW("{}: tensor '{}' at [{}, {}] overlaps tensor '{}' at [{}, {}]", source, clip(t.name), t.begin, t.end,
                clip(previous->name), previous->begin, previous->end);
    if (t.begin > cursor)
      CNN_THROW("{}: gap in the data section: bytes [{}, {}) before tensor '{}' belong to no tensor", source, cursor,
                t.begin, clip(t.name));
    cursor = t.end;
    previous = &t;
  }
  if (cursor != data_size)
    CNN_THROW("{}: gap in the data section: tensors cover {} bytes but it holds {} (trailing bytes belong to no "
              "tensor)", source, cursor, data_size);
  for (size_t i = 0; i < file.m_tensors.size(); ++i) file.m_index.emplace(file.m_tensors[i].name, i);
  return file;
}

static void check_header_length(uint64_t header_len, uint64_t total, const std::string& source) {
  if (total < 8)
    CNN_THROW("{}: file is {} bytes, shorter than the 8-byte header length (not a safetensors file)", source, total);
  if (header_len > kMaxHeaderBytes)
    CNN_THROW("{}: header length {} exceeds the limit of {} bytes", source, header_len, kMaxHeaderBytes);
  if (header_len > total - 8)
    CNN_THROW("{}: header length {} is larger than the {} bytes that follow it in the file (truncated?)", source,
              header_len, total - 8);
}

SafetensorsFile SafetensorsFile::parse(const std::string& bytes, const std::string& source) {
  check_header_length(bytes.size() >= 8 ? read_u64_le(reinterpret_cast<const uint8_t*>(bytes.data())) : 0,
                      bytes.size(), source);
  uint64_t header_len = read_u64_le(reinterpret_cast<const uint8_t*>(bytes.data()));
  uint64_t data_start = 8 + header_len;
  SafetensorsFile file = from_header(bytes.substr(8, header_len), bytes.size() - data_start, source);
  file.m_data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(data_start), bytes.end());
  return file;
}

namespace {
// Reads exactly n bytes at offset or throws with the path and the system's reason.
void read_exact(int fd, void* dst, uint64_t n, uint64_t offset, const std::string& path) {
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, std::min<uint64_t>(n, 1u << 30), static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) CNN_THROW("{}: read failed at offset {}: {}", path, offset, std::strerror(errno));
    if (r == 0) CNN_THROW("{}: file shrank while being read (end of file at offset {})", path, offset);
    p += r;
    n -= static_cast<uint64_t>(r);
    offset += static_cast<uint64_t>(r);
  }
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};
}  // namespace

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  Fd f;
  // O_NONBLOCK: opening a FIFO without a writer would otherwise wait forever; it has no effect on
  // reads of a regular file, the only kind read on.
  f.fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (f.fd < 0) CNN_THROW("cannot open safetensors file '{}': {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) CNN_THROW("cannot stat '{}': {}", path, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) CNN_THROW("'{}' is not a regular file", path);
  uint64_t total = static_cast<uint64_t>(st.st_size);
  uint8_t prefix[8] = {};
  if (total >= 8) read_exact(f.fd, prefix, 8, 0, path);
  uint64_t header_len = read_u64_le(prefix);
  check_header_length(header_len, total, path);
  // The whole file is held in memory: a file larger than the memory left is an error naming it,
  // not a bare std::bad_alloc.
  try {
    std::string header(header_len, '\0');
    read_exact(f.fd, header.data(), header_len, 8, path);
    SafetensorsFile file = from_header(header, total - 8 - header_len, path);
    file.m_data.resize(total - 8 - header_len);
    read_exact(f.fd, file.m_data.data(), file.m_data.size(), 8 + header_len, path);
    return file;
  } catch (const std::bad_alloc&) {
    CNN_THROW("{}: out of memory reading it ({} bytes, {} of them header)", path, total, header_len);
  }
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(m_tensors.size());
  for (const auto& t : m_tensors) out.push_back(t.name);
  return out;
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = m_index.find(name);
  if (it == m_index.end()) CNN_THROW("{}: no tensor named '{}'", m_source, clip(name));
  return m_tensors[it->second];
}

const uint8_t* SafetensorsFile::data(const std::string& name) const { return m_data.data() + info(name).begin; }

std::vector<uint8_t> SafetensorsFile::read_bytes(const std::string& name) const {
  const TensorInfo& t = info(name);
  return std::vector<uint8_t>(m_data.begin() + static_cast<std::ptrdiff_t>(t.begin),
                              m_data.begin() + static_cast<std::ptrdiff_t>(t.end));
}

std::vector<float> SafetensorsFile::read_f32(const std::string& name) const {
  const TensorInfo& t = info(name);
  const uint8_t* p = m_data.data() + t.begin;
  size_t n = static_cast<size_t>(t.numel());
  std::vector<float> out(n);
  switch (t.dtype) {
    case DType::f32:
      if (n) std::memcpy(out.data(), p, n * 4);
      break;
    case DType::f64:
      for (size_t i = 0; i < n; ++i) {
        double d;
        std::memcpy(&d, p + 8 * i, 8);
        out[i] = static_cast<float>(d);
      }
      break;
    case DType::f16:
      for (size_t i = 0; i < n; ++i) out[i] = half_to_float(load_u16(p + 2 * i));
      break;
    case DType::bf16:
      for (size_t i = 0; i < n; ++i) out[i] = bf16_to_float(load_u16(p + 2 * i));
      break;
    default:
      CNN_THROW("{}: tensor '{}' has dtype {}; read_f32 reads only F32, F64, F16 and BF16", m_source, clip(name),
                dtype_name(t.dtype));
  }
  return out;
}

// ---- writer ----

static std::string json_quote(const std::string& s) { return json(s).dump(); }

static void require_utf8(const std::string& s, const char* what) {
  try {
    (void)json_quote(s);
  } catch (const json::exception&) {
    CNN_THROW("{} '{}' is not valid UTF-8", what, clip(s));
  }
}

void SafetensorsWriter::add(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                            const void* data, size_t bytes) {
  CNN_CHECK(!name.empty(), "a tensor name must not be empty");
  CNN_CHECK(name != kMetadataKey, "'{}' is reserved for metadata and cannot name a tensor", kMetadataKey);
  require_utf8(name, "tensor name");
  CNN_CHECK(!m_index.count(name), "tensor '{}' was added twice; names must be unique", clip(name));
  uint64_t numel = 0, nbytes = 0;
  CNN_CHECK(checked_numel(shape, numel) && !__builtin_mul_overflow(numel, dtype_size(dtype), &nbytes),
            "tensor '{}': shape {} has a negative dimension or overflows", clip(name), shape_string(shape));
  CNN_CHECK(nbytes == bytes, "tensor '{}': {} {} needs {} bytes, got {}", clip(name), dtype_name(dtype),
            shape_string(shape), nbytes, bytes);
  CNN_CHECK(data != nullptr || bytes == 0, "tensor '{}': null data", clip(name));
  Entry e{name, dtype, shape, {}};
  if (bytes) e.bytes.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + bytes);
  m_index.emplace(name, m_entries.size());
  m_entries.push_back(std::move(e));
}

void SafetensorsWriter::add_f32(const std::string& name, const std::vector<int64_t>& shape, const float* data) {
  uint64_t numel = 0;
  CNN_CHECK(checked_numel(shape, numel) && numel <= std::numeric_limits<size_t>::max() / 4,
            "tensor '{}': shape {} has a negative dimension or overflows", clip(name), shape_string(shape));
  add(name, DType::f32, shape, data, static_cast<size_t>(numel) * 4);
}

void SafetensorsWriter::set_metadata(const std::string& key, const std::string& value) {
  require_utf8(key, "metadata key");
  require_utf8(value, "metadata value");
  m_metadata[key] = value;
}

std::vector<std::string> SafetensorsWriter::names() const {
  std::vector<std::string> out;
  for (const auto& e : m_entries) out.push_back(e.name);
  return out;
}

const std::vector<uint8_t>& SafetensorsWriter::tensor_bytes(const std::string& name) const {
  auto it = m_index.find(name);
  CNN_CHECK(it != m_index.end(), "no tensor named '{}' was added", clip(name));
  return m_entries[it->second].bytes;
}

std::string SafetensorsWriter::header() const {
  // Compact JSON like the reference writer: metadata first, then tensors in data order.
  std::string text = "{";
  if (!m_metadata.empty()) {
    text += json_quote(kMetadataKey) + ":{";
    bool first = true;
    for (const auto& [key, value] : m_metadata) {
      text += (first ? "" : ",") + json_quote(key) + ":" + json_quote(value);
      first = false;
    }
    text += "}";
  }
  uint64_t offset = 0;
  for (const auto& e : m_entries) {
    if (text.size() > 1) text += ",";
    text += json_quote(e.name) + ":{\"dtype\":\"" + dtype_name(e.dtype) + "\",\"shape\":[";
    for (size_t i = 0; i < e.shape.size(); ++i) text += (i ? "," : "") + std::to_string(e.shape[i]);
    text += fmt::format("],\"data_offsets\":[{},{}]}}", offset, offset + e.bytes.size());
    offset += e.bytes.size();
  }
  text += "}";
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data section 8-byte aligned
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((static_cast<uint64_t>(text.size()) >> (8 * i)) & 0xff);
  return out + text;
}

std::string SafetensorsWriter::serialize() const {
  std::string out = header();
  size_t total = out.size();
  for (const auto& e : m_entries) total += e.bytes.size();
  out.reserve(total);
  for (const auto& e : m_entries) out.append(reinterpret_cast<const char*>(e.bytes.data()), e.bytes.size());
  return out;
}

namespace {
bool write_all(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t r = ::write(fd, p, std::min<size_t>(n, 1u << 30));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return false;
    if (r == 0) {
      errno = EIO;
      return false;
    }
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}
}  // namespace

void SafetensorsWriter::write_atomic(const std::string& path) const {
  std::string tmp = fmt::format("{}.tmp-{}", path, ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) CNN_THROW("cannot write '{}': creating '{}' failed: {}", path, tmp, std::strerror(errno));
  auto fail = [&](const char* step) {
    int err = errno;
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    CNN_THROW("cannot write '{}': {} '{}' failed: {}", path, step, tmp, std::strerror(err));
  };
  std::string head = header();
  if (!write_all(fd, head.data(), head.size())) fail("writing");
  for (const auto& e : m_entries)
    if (!write_all(fd, e.bytes.data(), e.bytes.size())) fail("writing");
  if (::fsync(fd) != 0) fail("syncing");
  int rc = ::close(fd);
  fd = -1;
  if (rc != 0) fail("closing");
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail("renaming over the target");
  // The rename is durable only once the directory entry is: sync the directory.
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) CNN_THROW("wrote '{}' but cannot open its directory to sync it: {}", path, std::strerror(errno));
  int sync_rc = ::fsync(dfd);
  int sync_err = errno;
  ::close(dfd);
  if (sync_rc != 0 && sync_err != EINVAL)  // EINVAL: the file system cannot sync directories
    CNN_THROW("wrote '{}' but syncing its directory failed: {}", path, std::strerror(sync_err));
}

}  // namespace cnn
