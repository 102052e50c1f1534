// Hand-made gzip streams for the hostile-input tests: stored (uncompressed) deflate blocks, so a
// test can cut a stream exactly at a block boundary, and the CRC-32 that gzip and PNG both use.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cnn::test {

// CRC-32 (ISO 3309, reflected polynomial 0xEDB88320), bit by bit: slow and obviously right.
inline uint32_t crc32_of(const void* data, size_t n, uint32_t crc = 0) {
  const auto* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

inline void put_le32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
}

// A gzip member (RFC 1952) holding `chunks` in stored deflate blocks (RFC 1951 3.2.4), one block a
// chunk (each under 64 KiB). With complete = false the last block is not marked final and the
// CRC-32 and length trailer is left out: the stream as a cut at a block boundary leaves it, which
// decompresses to exactly the chunks given.
inline std::string gzip_stored(const std::vector<std::string>& chunks, bool complete = true) {
  std::string out("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03", 10);
  std::string all;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const std::string& c = chunks[i];
    const auto len = static_cast<uint16_t>(c.size());
    out += static_cast<char>(complete && i + 1 == chunks.size() ? 1 : 0);  // BFINAL, BTYPE 00
    out += static_cast<char>(len & 0xff);
    out += static_cast<char>(len >> 8);
    out += static_cast<char>(~len & 0xff);
    out += static_cast<char>((~len >> 8) & 0xff);
    out += c;
    all += c;
  }
  if (complete) {
    put_le32(out, crc32_of(all.data(), all.size()));
    put_le32(out, static_cast<uint32_t>(all.size()));
  }
  return out;
}

}  // namespace cnn::test
