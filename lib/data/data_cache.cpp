// The decoded-data cache (see data_cache.h). An entry, little-endian as the host writes it:
// "CNNDATA2"; u64 header length, the header, u64 hash of the header; the payloads (train pixels,
// train labels, val pixels, val labels, test pixels, test labels), then u64 hash of the payloads'
// hashes. The header: the key (u64 length, bytes); for train, val, test: i64 channels, height,
// width, count; u64 class-name count and each name; i64 bad_skipped; u64 note count and each note.
// Payloads are read straight into the splits' vectors and files are hashed through one 1 MiB
// buffer: fresh memory costs page faults, and a hit should touch no more of it than a decode does.
#include "data/data_cache.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <system_error>
#include <vector>

#include <fmt/format.h>
#include <unistd.h>

#include "core/cache_path.h"

namespace cnn {

static constexpr char kMagic[8] = {'C', 'N', 'N', 'D', 'A', 'T', 'A', '2'};
static constexpr uint64_t kMaxHeader = uint64_t{1} << 30;

std::string data_cache_dir() { return resolve_cache_path("", "CNN_DATA_CACHE", "data"); }

static uint64_t mix(uint64_t h) {  // splitmix64's finaliser
  h ^= h >> 30;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 27;
  h *= 0x94D049BB133111EBull;
  return h ^ (h >> 31);
}

void DataCacheHash::block(const uint8_t* p) {
  uint64_t w[4];
  std::memcpy(w, p, 32);
  a = (a ^ w[0]) * 0x9E3779B97F4A7C15ull;
  b = (b ^ w[1]) * 0xC2B2AE3D27D4EB4Full;
  c = (c ^ w[2]) * 0x165667B19E3779F9ull;
  d = (d ^ w[3]) * 0x27D4EB2F165667C5ull;
  a ^= a >> 29, b ^= b >> 31, c ^= c >> 27, d ^= d >> 33;
}

DataCacheHash::DataCacheHash(uint64_t seed)
    : a(seed ^ 0x9E3779B97F4A7C15ull), b(seed + 0x6A09E667F3BCC908ull), c(~seed), d(seed * 3 + 1) {}

void DataCacheHash::update(const void* data, size_t n) {
  if (n == 0) return;  // data may be null then (an empty vector's)
  const auto* p = static_cast<const uint8_t*>(data);
  total += n;
  if (held > 0) {
    const size_t take = std::min(n, sizeof tail - held);
    std::memcpy(tail + held, p, take);
    held += take, p += take, n -= take;
    if (held < sizeof tail) return;
    block(tail);
    held = 0;
  }
  for (; n >= 32; p += 32, n -= 32) block(p);
  std::memcpy(tail, p, n);
  held = n;
}

uint64_t DataCacheHash::digest() const {
  uint64_t h = mix(a) ^ mix(b + 1) ^ mix(c + 2) ^ mix(d + 3) ^ mix(total);
  for (size_t i = 0; i < held; ++i) h = (h ^ tail[i]) * 0x100000001B3ull;
  return mix(h);
}

uint64_t data_cache_hash(const void* data, size_t n, uint64_t seed) {
  DataCacheHash h(seed);
  h.update(data, n);
  return h.digest();
}

namespace {

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

}  // namespace

bool data_cache_hash_file(const std::string& path, uint64_t& size, uint64_t& hash) {
  File f(std::fopen(path.c_str(), "rb"));
  if (!f) return false;
  std::vector<uint8_t> buf(size_t{1} << 20);
  DataCacheHash h(1);
  for (;;) {
    const size_t got = std::fread(buf.data(), 1, buf.size(), f.get());
    h.update(buf.data(), got);
    if (got < buf.size()) break;
  }
  if (std::ferror(f.get())) return false;
  size = h.total;
  hash = h.digest();
  return true;
}

std::string data_cache_file(const std::string& dir, const std::string& key) {
  return (std::filesystem::path(dir) / fmt::format("{:016x}.bin", data_cache_hash(key.data(), key.size(), 17))).string();
}

namespace {

struct Writer {
  std::vector<uint8_t> out;
  void bytes(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  }
  void u64(uint64_t v) { bytes(&v, sizeof v); }
  void str(const std::string& s) {
    u64(s.size());
    bytes(s.data(), s.size());
  }
};

struct Reader {
  const uint8_t* p;
  size_t n, at = 0;
  bool ok = true;
  bool bytes(void* dst, size_t k) {
    if (!ok || k > n - at) return ok = false;
    std::memcpy(dst, p + at, k);
    at += k;
    return true;
  }
  uint64_t u64() {
    uint64_t v = 0;
    bytes(&v, sizeof v);
    return v;
  }
  std::string str() {
    const uint64_t k = u64();
    if (!ok || k > n - at) {
      ok = false;
      return {};
    }
    std::string s(reinterpret_cast<const char*>(p + at), k);
    at += k;
    return s;
  }
};

bool read_exact(std::FILE* f, void* dst, size_t n) { return n == 0 || std::fread(dst, 1, n, f) == n; }

}  // namespace

std::optional<DataSplits> data_cache_read(const std::string& dir, const std::string& key, std::string& why) {
  const std::string file = data_cache_file(dir, key);
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(file, ec);
  if (!std::filesystem::exists(st)) {
    why = "no entry";
    return std::nullopt;
  }
  if (!std::filesystem::is_regular_file(st)) {  // a FIFO there would block the open
    why = fmt::format("{} is not a regular file: ignored", file);
    return std::nullopt;
  }
  File f(std::fopen(file.c_str(), "rb"));
  if (!f) {
    why = fmt::format("{} cannot be opened: ignored", file);
    return std::nullopt;
  }
  auto bad = [&](const char* what) {
    why = fmt::format("{} {}: ignored", file, what);
    return std::nullopt;
  };
  const uint64_t file_size = std::filesystem::file_size(file, ec);
  if (ec) return bad("cannot be sized");
  char magic[8];
  uint64_t header_len = 0, header_hash = 0;
  if (!read_exact(f.get(), magic, 8) || std::memcmp(magic, kMagic, 8) != 0) return bad("is not a data cache entry");
  if (!read_exact(f.get(), &header_len, 8) || header_len > kMaxHeader || header_len > file_size)
    return bad("is not a whole entry");
  std::vector<uint8_t> header(header_len);
  if (!read_exact(f.get(), header.data(), header_len) || !read_exact(f.get(), &header_hash, 8))
    return bad("is not a whole entry");
  if (data_cache_hash(header.data(), header.size(), 3) != header_hash) return bad("is damaged (its hash does not match)");
  Reader r{header.data(), header.size()};
  if (r.str() != key || !r.ok) return bad("holds another key");
  DataSplits s;
  uint64_t counts[3] = {0, 0, 0};
  Dataset* splits[3] = {&s.train, &s.val, &s.test};
  for (int i = 0; i < 3; ++i) {
    splits[i]->channels = static_cast<int64_t>(r.u64());
    splits[i]->height = static_cast<int64_t>(r.u64());
    splits[i]->width = static_cast<int64_t>(r.u64());
    counts[i] = r.u64();
  }
  const uint64_t names = r.u64();
  for (uint64_t i = 0; r.ok && i < names; ++i) s.class_names.push_back(r.str());
  s.bad_skipped = static_cast<int64_t>(r.u64());
  const uint64_t notes = r.u64();
  for (uint64_t i = 0; r.ok && i < notes; ++i) s.notes.push_back(r.str());
  if (!r.ok || r.at != r.n) return bad("is not a whole entry");
  // The payloads' sizes, checked against the file's size before anything is sized from them.
  uint64_t payload = 0;
  for (int i = 0; i < 3; ++i) {
    const Dataset& d = *splits[i];
    if (d.channels < 0 || d.height < 0 || d.width < 0 || d.channels > 4 || d.height > (1 << 16) || d.width > (1 << 16))
      return bad("is not a whole entry");
    const uint64_t per = static_cast<uint64_t>(d.channels * d.height * d.width);
    if (counts[i] > file_size || (per != 0 && counts[i] > file_size / per)) return bad("is not a whole entry");
    payload += counts[i] * per + counts[i] * sizeof(int32_t);
  }
  if (file_size != 8 + 8 + header_len + 8 + payload + 8) return bad("is not a whole entry");
  DataCacheHash all(7);
  for (int i = 0; i < 3; ++i) {
    Dataset& d = *splits[i];
    d.pixels.resize(counts[i] * static_cast<uint64_t>(d.channels * d.height * d.width));
    d.labels.resize(counts[i]);
    if (!read_exact(f.get(), d.pixels.data(), d.pixels.size()) ||
        !read_exact(f.get(), d.labels.data(), d.labels.size() * sizeof(int32_t)))
      return bad("is not a whole entry");
    const uint64_t hp = data_cache_hash(d.pixels.data(), d.pixels.size(), 11);
    const uint64_t hl = data_cache_hash(d.labels.data(), d.labels.size() * sizeof(int32_t), 13);
    all.update(&hp, 8);
    all.update(&hl, 8);
  }
  uint64_t stored = 0;
  if (!read_exact(f.get(), &stored, 8)) return bad("is not a whole entry");
  if (all.digest() != stored) return bad("is damaged (its hash does not match)");
  return s;
}

bool data_cache_write(const std::string& dir, const std::string& key, const DataSplits& s, std::string& why) {
  Writer h;
  h.str(key);
  for (const Dataset* d : {&s.train, &s.val, &s.test})
    for (int64_t v : {d->channels, d->height, d->width, d->size()}) h.u64(static_cast<uint64_t>(v));
  h.u64(s.class_names.size());
  for (const std::string& n : s.class_names) h.str(n);
  h.u64(static_cast<uint64_t>(s.bad_skipped));
  h.u64(s.notes.size());
  for (const std::string& n : s.notes) h.str(n);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string file = data_cache_file(dir, key);
  const std::string tmp = fmt::format("{}.{}.tmp", file, static_cast<long>(getpid()));
  bool ok = false;
  {
    File f(std::fopen(tmp.c_str(), "wb"));
    if (f) {
      const uint64_t header_len = h.out.size(), header_hash = data_cache_hash(h.out.data(), h.out.size(), 3);
      ok = std::fwrite(kMagic, 1, 8, f.get()) == 8 && std::fwrite(&header_len, 8, 1, f.get()) == 1 &&
           std::fwrite(h.out.data(), 1, h.out.size(), f.get()) == h.out.size() &&
           std::fwrite(&header_hash, 8, 1, f.get()) == 1;
      DataCacheHash all(7);
      for (const Dataset* d : {&s.train, &s.val, &s.test}) {
        const size_t label_bytes = d->labels.size() * sizeof(int32_t);
        ok = ok && (d->pixels.empty() || std::fwrite(d->pixels.data(), 1, d->pixels.size(), f.get()) == d->pixels.size());
        ok = ok && (label_bytes == 0 || std::fwrite(d->labels.data(), 1, label_bytes, f.get()) == label_bytes);
        const uint64_t hp = data_cache_hash(d->pixels.data(), d->pixels.size(), 11);
        const uint64_t hl = data_cache_hash(d->labels.data(), label_bytes, 13);
        all.update(&hp, 8);
        all.update(&hl, 8);
      }
      const uint64_t stored = all.digest();
      ok = ok && std::fwrite(&stored, 8, 1, f.get()) == 1;
      ok = std::fflush(f.get()) == 0 && ok;
    }
  }
  if (!ok) {
    why = fmt::format("cannot write {}{}", tmp, ec ? " (" + ec.message() + ")" : "");
    std::filesystem::remove(tmp, ec);
    return false;
  }
  std::filesystem::rename(tmp, file, ec);
  if (ec) {
    why = fmt::format("cannot rename {} to {}: {}", tmp, file, ec.message());
    std::filesystem::remove(tmp, ec);
    return false;
  }
  return true;
}

}  // namespace cnn
