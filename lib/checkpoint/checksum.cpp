// CRC-32C by slicing-by-8 (Kounavis and Berry, "Novel table lookup-based algorithms for
// high-performance CRC generation", IEEE TC 2008): eight tables, one 64-bit load per step.
// Trap: the word load assumes a little-endian host (the safetensors reader asserts the same).
#include "checkpoint/checksum.h"

#include <array>
#include <cstring>

#include "checkpoint/safetensors.h"
#include "core/error.h"

namespace cnn {

namespace {

constexpr uint32_t kPolynomial = 0x82F63B78u;  // 0x1EDC6F41 bit-reversed

using Tables = std::array<std::array<uint32_t, 256>, 8>;

// tables[0][b]: CRC of the byte b; tables[k][b]: the same byte followed by k zero bytes.
constexpr Tables make_tables() {
  Tables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int bit = 0; bit < 8; ++bit) c = (c >> 1) ^ ((c & 1u) ? kPolynomial : 0u);
    t[0][b] = c;
  }
  for (size_t k = 1; k < 8; ++k)
    for (size_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xffu];
  return t;
}

constexpr Tables kTables = make_tables();

}  // namespace

uint32_t crc32c_bitwise(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int bit = 0; bit < 8; ++bit) c = (c >> 1) ^ ((c & 1u) ? kPolynomial : 0u);
  }
  return ~c;
}

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    w ^= c;
    c = kTables[7][w & 0xff] ^ kTables[6][(w >> 8) & 0xff] ^ kTables[5][(w >> 16) & 0xff] ^
        kTables[4][(w >> 24) & 0xff] ^ kTables[3][(w >> 32) & 0xff] ^ kTables[2][(w >> 40) & 0xff] ^
        kTables[1][(w >> 48) & 0xff] ^ kTables[0][w >> 56];
  }
  for (; n > 0; --n, ++p) c = (c >> 8) ^ kTables[0][(c ^ *p) & 0xff];
  return ~c;
}

std::string checksum_hex(uint32_t crc) { return fmt::format("{:08x}", crc); }

bool parse_checksum_hex(const std::string& text, uint32_t& crc) {
  if (text.size() != 8) return false;
  uint32_t v = 0;
  for (char ch : text) {
    int d = (ch >= '0' && ch <= '9') ? ch - '0' : (ch >= 'a' && ch <= 'f') ? ch - 'a' + 10
                                                : (ch >= 'A' && ch <= 'F') ? ch - 'A' + 10 : -1;
    if (d < 0) return false;
    v = (v << 4) | static_cast<uint32_t>(d);
  }
  crc = v;
  return true;
}

std::string compute_checksum(const void* data, size_t n) { return checksum_hex(crc32c(data, n)); }

std::string checksum_key(const std::string& tensor_name) { return kChecksumKeyPrefix + tensor_name; }

void add_checksums(SafetensorsWriter& writer) {
  for (const auto& name : writer.names()) {
    const auto& bytes = writer.tensor_bytes(name);
    writer.set_metadata(checksum_key(name), compute_checksum(bytes.data(), bytes.size()));
  }
}

ChecksumReport verify_checksums(const SafetensorsFile& file) {
  ChecksumReport report;
  const auto& meta = file.metadata();
  auto mismatch = [&](const std::string& name, std::string message) {
    if (!report.ok()) return;
    report.first_mismatch = name;
    report.message = fmt::format("{}: tensor '{}': {}", file.source(), clip_text(name, 80), message);
  };
  for (const auto& t : file.tensors()) {
    auto it = meta.find(checksum_key(t.name));
    if (it == meta.end()) {
      report.unchecked.push_back(t.name);
      continue;
    }
    uint32_t expected = 0;
    if (!parse_checksum_hex(it->second, expected)) {
      mismatch(t.name, fmt::format("checksum entry '{}' is not 8 hex digits", clip_text(it->second, 40)));
      continue;
    }
    uint32_t actual = crc32c(file.data(t.name), t.bytes());
    if (actual != expected)
      mismatch(t.name, fmt::format("crc32c of its {} bytes is {} but the metadata records {}", t.bytes(),
                                   checksum_hex(actual), checksum_hex(expected)));
    else
      ++report.matched;
  }
  const std::string prefix = kChecksumKeyPrefix;
  for (auto it = meta.lower_bound(prefix); it != meta.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
    std::string name = it->first.substr(prefix.size());
    if (!file.contains(name)) mismatch(name, "has a checksum entry but the file holds no such tensor");
  }
  return report;
}

}  // namespace cnn
