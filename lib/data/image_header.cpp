// Image header parsing (see image_header.h). Byte layouts: PNG 1.2 (W3C) section 11.2.2 IHDR;
// JPEG ITU-T T.81 B.2.2 frame header; BMP BITMAPCOREHEADER / BITMAPINFOHEADER; Netpbm pnm(5) and
// pam(5); TIFF 6.0 section 2 (IFD entries) and BigTIFF; WebP container and VP8 (RFC 6386 9.1) /
// VP8L bitstream headers. Trap: every read is bounds-checked; the bytes come from any file.
#include "data/image_header.h"

#include <cstring>

#include <fmt/format.h>

namespace cnn {

namespace {

class Bytes {
public:
  Bytes(const uint8_t* p, size_t n, bool little) : m_p(p), m_n(n), m_little(little) {}
  bool has(uint64_t at, uint64_t len) const { return at <= m_n && len <= m_n - at; }
  uint64_t get(uint64_t at, int len) const {  // caller checked has(at, len)
    uint64_t v = 0;
    for (int i = 0; i < len; ++i) {
      const uint64_t b = m_p[at + static_cast<uint64_t>(m_little ? len - 1 - i : i)];
      v = (v << 8) | b;
    }
    return v;
  }

private:
  const uint8_t* m_p;
  size_t m_n;
  bool m_little;
};

bool starts(const uint8_t* p, size_t n, const char* sig, size_t len) { return n >= len && std::memcmp(p, sig, len) == 0; }

std::string png(const uint8_t* p, size_t n, ImageHeader& h) {
  Bytes b(p, n, false);
  if (!b.has(12, 12) || std::memcmp(p + 12, "IHDR", 4) != 0) return "PNG without an IHDR chunk first";
  h.width = static_cast<int64_t>(b.get(16, 4));
  h.height = static_cast<int64_t>(b.get(20, 4));
  return "";
}

std::string jpeg(const uint8_t* p, size_t n, ImageHeader& h) {
  Bytes b(p, n, false);
  size_t i = 2;
  while (i < n) {
    if (p[i] != 0xFF) return fmt::format("JPEG: expected a marker at byte {}", i);
    while (i < n && p[i] == 0xFF) ++i;  // fill bytes
    if (i >= n) break;
    const uint8_t m = p[i++];
    if ((m >= 0xD0 && m <= 0xD7) || m == 0x01) continue;  // markers without a length
    if (m == 0xD9 || m == 0xDA) return "JPEG without a frame header (SOF) before its image data";
    if (!b.has(i, 2)) break;
    const uint64_t len = b.get(i, 2);
    if (len < 2) return fmt::format("JPEG: segment length {} at byte {}", len, i);
    const bool sof = m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC;
    if (sof) {
      if (len < 7 || !b.has(i, 7)) break;
      h.height = static_cast<int64_t>(b.get(i + 3, 2));
      h.width = static_cast<int64_t>(b.get(i + 5, 2));
      return "";
    }
    i += len;
  }
  return "JPEG cut short before its frame header (SOF)";
}

std::string bmp(const uint8_t* p, size_t n, ImageHeader& h) {
  Bytes b(p, n, true);
  if (!b.has(14, 4)) return "BMP cut short in its header";
  const uint64_t dib = b.get(14, 4);
  if (dib == 12) {  // BITMAPCOREHEADER: unsigned 16-bit sizes
    if (!b.has(18, 4)) return "BMP cut short in its header";
    h.width = static_cast<int64_t>(b.get(18, 2));
    h.height = static_cast<int64_t>(b.get(20, 2));
    return "";
  }
  if (dib < 16 || !b.has(18, 8)) return fmt::format("BMP with an info header of {} bytes", dib);
  h.width = static_cast<int32_t>(b.get(18, 4));
  const int64_t height = static_cast<int32_t>(b.get(22, 4));  // negative: rows stored top-down
  h.height = height < 0 ? -height : height;
  if (h.width < 0) return fmt::format("BMP with a negative width {}", h.width);
  return "";
}

// Netpbm: whitespace-separated ASCII tokens, '#' starts a comment up to the end of the line.
class PnmTokens {
public:
  PnmTokens(const uint8_t* p, size_t n) : m_p(p), m_n(n), m_i(2) {}
  bool next(std::string& tok) {
    tok.clear();
    for (;;) {
      while (m_i < m_n && std::strchr(" \t\r\n\v\f", m_p[m_i]) && m_p[m_i] != 0) ++m_i;
      if (m_i < m_n && m_p[m_i] == '#') {
        while (m_i < m_n && m_p[m_i] != '\n') ++m_i;
        continue;
      }
      break;
    }
    while (m_i < m_n && m_p[m_i] != 0 && !std::strchr(" \t\r\n\v\f#", m_p[m_i]) && tok.size() < 32) tok += char(m_p[m_i++]);
    return !tok.empty();
  }

private:
  const uint8_t* m_p;
  size_t m_n, m_i;
};

bool parse_count(const std::string& tok, int64_t& v) {
  if (tok.empty() || tok.size() > 18) return false;  // 18 digits fit in int64_t
  v = 0;
  for (char c : tok) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  return true;
}

std::string pnm(const uint8_t* p, size_t n, ImageHeader& h) {
  PnmTokens t(p, n);
  std::string tok;
  if (p[1] != '7') {
    if (!t.next(tok) || !parse_count(tok, h.width)) return "PNM header without a width";
    if (!t.next(tok) || !parse_count(tok, h.height)) return "PNM header without a height";
    return "";
  }
  bool w = false, hh = false;
  while (t.next(tok) && tok != "ENDHDR") {
    if (tok == "WIDTH" || tok == "HEIGHT") {
      std::string v;
      if (!t.next(v) || !parse_count(v, tok == "WIDTH" ? h.width : h.height)) return "PAM header with a bad " + tok;
      (tok == "WIDTH" ? w : hh) = true;
    }
  }
  if (!w || !hh) return "PAM header without WIDTH and HEIGHT";
  return "";
}

std::string tiff(const uint8_t* p, size_t n, ImageHeader& h) {
  const bool little = p[0] == 'I';
  Bytes b(p, n, little);
  const bool big = b.get(2, 2) == 43;  // BigTIFF: 64-bit offsets and counts
  uint64_t ifd = 0;
  if (big) {
    if (!b.has(4, 12) || b.get(4, 2) != 8) return "BigTIFF cut short or with an unknown offset size";
    ifd = b.get(8, 8);
  } else {
    if (!b.has(4, 4)) return "TIFF cut short in its header";
    ifd = b.get(4, 4);
  }
  const int count_len = big ? 8 : 2, entry_len = big ? 20 : 12, value_at = big ? 12 : 8;
  if (!b.has(ifd, static_cast<uint64_t>(count_len))) return fmt::format("TIFF whose first IFD (byte {}) is outside the file", ifd);
  const uint64_t count = b.get(ifd, count_len);
  bool got_w = false, got_h = false;
  for (uint64_t k = 0; k < count; ++k) {
    const uint64_t at = ifd + static_cast<uint64_t>(count_len) + k * static_cast<uint64_t>(entry_len);
    if (!b.has(at, static_cast<uint64_t>(entry_len))) return "TIFF cut short in its first IFD";
    const uint64_t tag = b.get(at, 2), type = b.get(at + 2, 2);
    if (tag != 256 && tag != 257) continue;  // ImageWidth, ImageLength
    uint64_t v = 0;
    if (type == 3) v = b.get(at + static_cast<uint64_t>(value_at), 2);        // SHORT
    else if (type == 4) v = b.get(at + static_cast<uint64_t>(value_at), 4);   // LONG
    else if (type == 16 && big) v = b.get(at + 12, 8);                        // LONG8
    else return fmt::format("TIFF tag {} of type {}", tag, type);
    const int64_t value = v > (uint64_t{1} << 62) ? (int64_t{1} << 62) : static_cast<int64_t>(v);
    (tag == 256 ? h.width : h.height) = value;
    (tag == 256 ? got_w : got_h) = true;
    if (got_w && got_h) return "";
  }
  return "TIFF without ImageWidth and ImageLength in its first IFD";
}

std::string webp(const uint8_t* p, size_t n, ImageHeader& h) {
  Bytes b(p, n, true);
  if (!b.has(12, 18)) return "WebP cut short in its header";
  if (std::memcmp(p + 12, "VP8 ", 4) == 0) {
    if (p[23] != 0x9D || p[24] != 0x01 || p[25] != 0x2A) return "WebP VP8 without its start code";
    h.width = static_cast<int64_t>(b.get(26, 2) & 0x3FFF);
    h.height = static_cast<int64_t>(b.get(28, 2) & 0x3FFF);
    return "";
  }
  if (std::memcmp(p + 12, "VP8L", 4) == 0) {
    if (p[20] != 0x2F) return "WebP VP8L without its signature byte";
    const uint64_t bits = b.get(21, 4);
    h.width = static_cast<int64_t>(bits & 0x3FFF) + 1;
    h.height = static_cast<int64_t>((bits >> 14) & 0x3FFF) + 1;
    return "";
  }
  if (std::memcmp(p + 12, "VP8X", 4) == 0) {
    h.width = static_cast<int64_t>(b.get(24, 3)) + 1;
    h.height = static_cast<int64_t>(b.get(27, 3)) + 1;
    return "";
  }
  return "WebP with an unknown first chunk";
}

}  // namespace

std::string read_image_header(const uint8_t* p, size_t n, ImageHeader& h) {
  h = ImageHeader{};
  std::string problem;
  if (starts(p, n, "\x89PNG\r\n\x1a\n", 8)) {
    h.format = "PNG";
    problem = png(p, n, h);
  } else if (starts(p, n, "\xFF\xD8\xFF", 3)) {
    h.format = "JPEG";
    problem = jpeg(p, n, h);
  } else if (starts(p, n, "BM", 2)) {
    h.format = "BMP";
    problem = bmp(p, n, h);
  } else if (n >= 3 && p[0] == 'P' && p[1] >= '1' && p[1] <= '7' && std::strchr(" \t\r\n", p[2]) && p[2] != 0) {
    h.format = "PNM";
    problem = pnm(p, n, h);
  } else if (starts(p, n, "II*\0", 4) || starts(p, n, "MM\0*", 4) || starts(p, n, "II+\0", 4) ||
             starts(p, n, "MM\0+", 4)) {
    h.format = "TIFF";
    problem = tiff(p, n, h);
  } else if (starts(p, n, "RIFF", 4) && n >= 12 && std::memcmp(p + 8, "WEBP", 4) == 0) {
    h.format = "WebP";
    problem = webp(p, n, h);
  } else {
    std::string head;
    for (size_t i = 0; i < std::min<size_t>(n, 8); ++i) head += fmt::format("{}{:02x}", i ? " " : "", p[i]);
    return n == 0 ? "empty file" : fmt::format("not a PNG, JPEG, BMP, PNM, TIFF or WebP image (first bytes {})", head);
  }
  if (problem.empty() && (h.width <= 0 || h.height <= 0)) {
    problem = fmt::format("{} header declares {} x {} pixels", h.format, h.width, h.height);
  }
  return problem;
}

}  // namespace cnn
