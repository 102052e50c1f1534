// zlib-backed file reads and writes (see gzip.h). gzread passes plain files through unchanged.
#include "data/gzip.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

#include "core/error.h"

namespace cnn {

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) CNN_THROW("{}: cannot open: {}", path, std::strerror(errno));
  gzbuffer(f, 1 << 20);
  std::vector<uint8_t> out;
  constexpr unsigned kChunk = 1u << 22;
  for (;;) {
    size_t old = out.size();
    out.resize(old + kChunk);
    int got = gzread(f, out.data() + old, kChunk);
    if (got < 0) {
      int code = 0;
      std::string msg = gzerror(f, &code);
      gzclose(f);
      CNN_THROW("{}: read failed: {}", path, msg);
    }
    out.resize(old + static_cast<size_t>(got));
    if (got < static_cast<int>(kChunk)) break;
  }
  gzclose(f);
  return out;
}

void write_gzip_file(const std::string& path, const void* data, size_t bytes) {
  gzFile f = gzopen(path.c_str(), "wb6");
  if (!f) CNN_THROW("{}: cannot create: {}", path, std::strerror(errno));
  const auto* p = static_cast<const uint8_t*>(data);
  while (bytes > 0) {
    unsigned n = static_cast<unsigned>(std::min<size_t>(bytes, 1u << 30));
    if (gzwrite(f, p, n) != static_cast<int>(n)) {
      gzclose(f);
      CNN_THROW("{}: write failed", path);
    }
    p += n;
    bytes -= n;
  }
  if (gzclose(f) != Z_OK) CNN_THROW("{}: write failed on close", path);
}

void write_file_bytes(const std::string& path, const void* data, size_t bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) CNN_THROW("{}: cannot create: {}", path, std::strerror(errno));
  size_t wrote = bytes ? std::fwrite(data, 1, bytes, f) : 0;
  bool closed = std::fclose(f) == 0;
  bool ok = wrote == bytes && closed;
  if (!ok) CNN_THROW("{}: write failed after {} of {} bytes", path, wrote, bytes);
}

}  // namespace cnn
