// File reads through our own inflate loop (see gzip.h), not gzread: gzread returns a truncated
// stream's bytes as if they were the whole file and ignores a missing trailer, and gzopen opens a
// FIFO blocking. The output buffer starts at the size the gzip trailer states (gzip_size_hint), so
// it is allocated and zero-filled once. Trap: offsets in messages count compressed bytes from the
// start of the file.
#include "data/gzip.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>

#include "core/error.h"

namespace cnn {

namespace {

constexpr int64_t kInChunk = int64_t{1} << 20;
constexpr size_t kOutChunk = size_t{4} << 20;

// Reads up to n bytes into buf; 0 at the end. Throws on a read error.
using Source = std::function<size_t(uint8_t* buf, size_t n)>;

std::string file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// An open regular file; closes on destruction.
class File {
public:
  explicit File(const std::string& path) : m_path(path) {
    if (path.empty()) CNN_THROW("the data path is empty (set data.path)");
    // O_NONBLOCK: opening a FIFO without a writer would otherwise wait forever. It has no effect
    // on reads of a regular file, the only kind we go on to read.
    m_fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (m_fd < 0) {
      const int err = errno;
      struct stat st {};
      if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
        CNN_THROW("{}: is {}, not a regular file (data files must be regular files)", path, file_kind(st.st_mode));
      }
      CNN_THROW("{}: cannot open: {}{}", path, std::strerror(err), err == ENOENT ? " " + where_looked(path) : "");
    }
    struct stat st {};
    if (::fstat(m_fd, &st) != 0) {
      const int err = errno;
      ::close(m_fd);
      CNN_THROW("{}: cannot stat: {}", path, std::strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(m_fd);
      CNN_THROW("{}: is {}, not a regular file (data files must be regular files)", path, file_kind(st.st_mode));
    }
    m_size = static_cast<int64_t>(st.st_size);
  }
  ~File() { ::close(m_fd); }
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  int64_t size() const { return m_size; }
  // n bytes at `offset`, read in place (the next read() starts where it would have); false when
  // fewer are there.
  bool read_at(uint8_t* buf, size_t n, int64_t offset) const {
    return ::pread(m_fd, buf, n, static_cast<off_t>(offset)) == static_cast<ssize_t>(n);
  }
  size_t read(uint8_t* buf, size_t n) {
    for (;;) {
      ssize_t got = ::read(m_fd, buf, n);
      if (got >= 0) return static_cast<size_t>(got);
      if (errno == EINTR) continue;
      CNN_THROW("{}: read failed: {}", m_path, std::strerror(errno));
    }
  }

private:
  std::string m_path;
  int m_fd = -1;
  int64_t m_size = 0;
};

std::string too_large(const std::string& name, int64_t limit, bool gz) {
  return fmt::format("{}: holds more than {} bytes{}, the limit for one data file (kMaxDataFileBytes in "
                     "lib/data/data_limits.h)", name, limit, gz ? " after decompression" : "");
}

// Inflates gzip members from `in` (the first `have` bytes of `first` already read) into out, up to
// `stop` bytes (head reads stop early and skip the integrity checks of what they don't read). The
// output starts at `out_hint` bytes (what the trailer says, bounded by the caller) and grows from there.
void inflate_all(const std::string& name, const Source& in, std::vector<uint8_t>& first, size_t have, int64_t limit,
                 int64_t stop, int64_t out_hint, std::vector<uint8_t>& out) {
  std::vector<uint8_t>& buf = first;  // at least 2 bytes (see read_source)
  z_stream z{};
  if (inflateInit2(&z, 15 + 16) != Z_OK) CNN_THROW("{}: zlib cannot start inflating", name);
  struct End {
    z_stream* z;
    ~End() { inflateEnd(z); }
  } end{&z};
  z.next_in = buf.data();
  z.avail_in = static_cast<uInt>(have);
  int64_t fed = static_cast<int64_t>(have);  // compressed bytes handed to zlib so far
  bool eof = have == 0;
  auto offset = [&] { return fed - static_cast<int64_t>(z.avail_in); };
  auto refill = [&] {
    if (z.avail_in > 0 || eof) return;
    size_t got = in(buf.data(), buf.size());
    eof = got == 0;
    fed += static_cast<int64_t>(got);
    z.next_in = buf.data();
    z.avail_in = static_cast<uInt>(got);
  };
  int64_t members = 1;
  bool out_full = false;  // the last inflate filled its output: it may have more without new input
  size_t made = 0;        // bytes of `out` inflated so far; out is cut to them on the way out
  for (;;) {
    refill();
    if (z.avail_in == 0 && !out_full) {
      CNN_THROW("{}: truncated gzip data: the stream ends at byte {} before the end of member {} (its deflate data "
                "or the 8-byte CRC-32 and length trailer is missing; {} bytes decompressed); the file is cut short, "
                "download or copy it again", name, offset(), members, made);
    }
    if (made == out.size()) {
      // Full: grow with what came out so far (small files stay small), 4 MiB at a time at most, or
      // at once to the hint. Growing only when full keeps each byte zero-filled once.
      const int64_t grow = std::max<int64_t>(
          std::clamp<int64_t>(static_cast<int64_t>(made), 64 << 10, static_cast<int64_t>(kOutChunk)),
          out_hint - static_cast<int64_t>(made));
      out.resize(made + static_cast<size_t>(std::min<int64_t>(grow, limit + 1 - static_cast<int64_t>(made))));
    }
    z.next_out = out.data() + made;
    z.avail_out = static_cast<uInt>(std::min<size_t>(out.size() - made, size_t{1} << 30));
    const int ret = inflate(&z, Z_NO_FLUSH);
    out_full = z.avail_out == 0;
    made = static_cast<size_t>(z.next_out - out.data());
    if (stop >= 0 && static_cast<int64_t>(made) >= stop) {
      out.resize(made);
      return;
    }
    if (static_cast<int64_t>(made) > limit) CNN_THROW("{}", too_large(name, limit, true));
    if (ret == Z_DATA_ERROR) {
      const std::string why = z.msg ? z.msg : "invalid data";
      const bool check = why == "incorrect data check" || why == "incorrect length check";
      CNN_THROW("{}: corrupt gzip data at byte {} (member {}): {}{}", name, offset(), members, why,
                check ? " (the decompressed data doesn't match the CRC-32 or length stored in the trailer)" : "");
    }
    if (ret == Z_MEM_ERROR) CNN_THROW("{}: out of memory while decompressing", name);
    if (ret == Z_NEED_DICT || ret == Z_STREAM_ERROR) CNN_THROW("{}: unsupported gzip data at byte {}", name, offset());
    if (ret != Z_STREAM_END) continue;
    // A member ended (its CRC-32 and length checked by zlib): more members, or the end of the file.
    refill();
    if (z.avail_in == 0) {
      out.resize(made);
      return;
    }
    if (z.avail_in == 1) {  // one byte left in the buffer: pull the next ones behind it
      const uint8_t b0 = z.next_in[0];
      buf[0] = b0;
      size_t got = in(buf.data() + 1, buf.size() - 1);
      fed += static_cast<int64_t>(got);
      eof = got == 0;
      z.next_in = buf.data();
      z.avail_in = static_cast<uInt>(got + 1);
    }
    if (z.avail_in < 2 || z.next_in[0] != 0x1f || z.next_in[1] != 0x8b) {
      CNN_THROW("{}: unexpected data after the end of gzip member {} at byte {} (not another gzip member)", name,
                members, offset());
    }
    ++members;
    if (inflateReset(&z) != Z_OK) CNN_THROW("{}: zlib cannot restart inflating", name);
  }
}

// The shared body of every read: gzip when the first two bytes say so, else the bytes as they are.
std::vector<uint8_t> read_source(const std::string& name, const Source& in, int64_t plain_size_hint, int64_t limit,
                                 int64_t stop, bool decompress, int64_t out_hint = 0) {
  // The input buffer: the whole file when it is small (the size is a hint: a file may grow).
  std::vector<uint8_t> first(static_cast<size_t>(std::clamp<int64_t>(plain_size_hint + 1, 2, kInChunk)));
  size_t have = 0;
  while (have < 2) {  // a read may return fewer bytes than asked
    size_t got = in(first.data() + have, first.size() - have);
    if (got == 0) break;
    have += got;
  }
  std::vector<uint8_t> out;
  if (decompress && have >= 2 && first[0] == 0x1f && first[1] == 0x8b) {
    inflate_all(name, in, first, have, limit, stop, out_hint, out);
    if (stop >= 0 && static_cast<int64_t>(out.size()) > stop) out.resize(static_cast<size_t>(stop));
    return out;
  }
  if (stop < 0 && plain_size_hint > limit) CNN_THROW("{}", too_large(name, limit, false));
  out.reserve(static_cast<size_t>(std::clamp<int64_t>(plain_size_hint, 0, limit)));
  out.insert(out.end(), first.begin(), first.begin() + static_cast<std::ptrdiff_t>(have));
  for (size_t got = have; got > 0 && (stop < 0 || static_cast<int64_t>(out.size()) < stop);) {
    got = in(first.data(), first.size());
    out.insert(out.end(), first.begin(), first.begin() + static_cast<std::ptrdiff_t>(got));
    if (stop < 0 && static_cast<int64_t>(out.size()) > limit) CNN_THROW("{}", too_large(name, limit, false));
  }
  if (stop >= 0 && static_cast<int64_t>(out.size()) > stop) out.resize(static_cast<size_t>(stop));
  return out;
}

// An output size to start from for a gzip stream of `n` compressed bytes whose last 4 are
// `trailer`: the last member's ISIZE (its length modulo 2^32), kept within what n bytes can hold
// (deflate expands at most 1032:1) and what the read may write (up to `stop` for a head read, one
// past the limit otherwise); 0 (no hint) below a member's 18-byte minimum. Only the first size of
// the output buffer: never trusted beyond it.
int64_t gzip_size_hint(const uint8_t* trailer, int64_t n, int64_t limit, int64_t stop) {
  if (n < 18) return 0;
  const uint8_t* t = trailer;
  const int64_t isize = int64_t{t[0]} | int64_t{t[1]} << 8 | int64_t{t[2]} << 16 | int64_t{t[3]} << 24;
  const int64_t cap = stop >= 0 ? std::min(stop, limit + 1) : limit + 1;
  return std::max<int64_t>(1, std::min({isize, n * 1032, cap}));
}

std::vector<uint8_t> read_path(const std::string& path, int64_t limit, int64_t stop, bool decompress) {
  File f(path);
  // The trailer's size hint (read_source uses it only when the file is gzip).
  uint8_t trailer[4];
  const int64_t hint = decompress && f.size() >= 18 && f.read_at(trailer, 4, f.size() - 4)
                           ? gzip_size_hint(trailer, f.size(), limit, stop)
                           : 0;
  return read_source(path, [&](uint8_t* b, size_t n) { return f.read(b, n); }, f.size(), limit, stop, decompress, hint);
}

}  // namespace

std::vector<uint8_t> read_file_bytes(const std::string& path, int64_t limit) {
  return read_path(path, limit, -1, true);
}

std::vector<uint8_t> read_file_head(const std::string& path, int64_t n) {
  return read_path(path, kMaxDataFileBytes, std::max<int64_t>(n, 0), true);
}

std::vector<uint8_t> read_raw_file(const std::string& path, int64_t limit) {
  return read_path(path, limit, limit + 1, false);
}

std::vector<uint8_t> decode_file_bytes(const std::string& name, const uint8_t* data, size_t size, int64_t limit) {
  size_t pos = 0;
  Source in = [&](uint8_t* b, size_t n) {
    size_t k = std::min(n, size - pos);
    if (k) std::memcpy(b, data + pos, k);
    pos += k;
    return k;
  };
  const int64_t n = static_cast<int64_t>(size);
  return read_source(name, in, n, limit, -1, true, size >= 4 ? gzip_size_hint(data + size - 4, n, limit, -1) : 0);
}

std::string where_looked(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  const fs::path abs = fs::absolute(p, ec);
  if (p.is_absolute() || ec) return fmt::format("(looked at {})", path);
  return fmt::format("(looked at {}: a relative path is relative to the working directory, {})", abs.string(),
                     fs::current_path(ec).string());
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

const char* gzip_inflater() {
  static const std::string name = std::string("zlib ") + zlibVersion();
  return name.c_str();
}

}  // namespace cnn
