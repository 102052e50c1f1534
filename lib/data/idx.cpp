// IDX reader (the MNIST / Fashion-MNIST container: big-endian header, then raw uint8 values).
// Trap: the files may be gzip-compressed under either name; read_file_bytes handles both, but we
// look for "name" before "name.gz" so a stale uncompressed copy wins: the note says which was read.
#include <filesystem>

#include "core/error.h"
#include "data/gzip.h"
#include "data/sources.h"

namespace cnn {

namespace {

constexpr uint32_t kImagesMagic = 0x00000803;  // unsigned byte, 3 dims
constexpr uint32_t kLabelsMagic = 0x00000801;  // unsigned byte, 1 dim

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

std::string find_file(const std::string& dir, const std::string& name) {
  namespace fs = std::filesystem;
  for (const std::string& candidate : {name, name + ".gz"}) {
    fs::path p = fs::path(dir) / candidate;
    if (fs::is_regular_file(p)) return p.string();
  }
  CNN_THROW("{}: neither {} nor {}.gz exists (data.format idx expects train-images-idx3-ubyte, "
            "train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte, each optionally .gz)",
            dir, name, name);
}

// Reads one idx file; dims receives its dimensions after the magic number.
std::vector<uint8_t> read_idx(const std::string& path, uint32_t magic, std::vector<int64_t>& dims) {
  std::vector<uint8_t> bytes = read_file_bytes(path);
  const int rank = static_cast<int>(magic & 0xff);
  if (bytes.size() < 4) CNN_THROW("{}: {} bytes, too short for an idx header", path, bytes.size());
  uint32_t got = be32(bytes.data());
  if (got != magic) {
    CNN_THROW("{}: bad magic number 0x{:08x}, expected 0x{:08x} (idx {} of unsigned bytes)", path, got, magic,
              rank == 3 ? "images" : "labels");
  }
  const size_t header = 4 + 4 * static_cast<size_t>(rank);
  if (bytes.size() < header) CNN_THROW("{}: {} bytes, too short for an idx header of {} dims", path, bytes.size(), rank);
  dims.clear();
  size_t count = 1;
  for (int i = 0; i < rank; ++i) {
    dims.push_back(be32(bytes.data() + 4 + 4 * i));
    if (dims.back() == 0 && i > 0) CNN_THROW("{}: dimension {} is 0", path, i);
    count *= static_cast<size_t>(dims.back());
  }
  if (bytes.size() - header != count) {
    CNN_THROW("{}: header says {} values ({}), the file holds {}", path, count,
              rank == 3 ? fmt::format("{}x{}x{}", dims[0], dims[1], dims[2]) : fmt::format("{}", dims[0]),
              bytes.size() - header);
  }
  return std::vector<uint8_t>(bytes.begin() + static_cast<std::ptrdiff_t>(header), bytes.end());
}

Dataset read_pair(const std::string& dir, const std::string& prefix, std::string& note) {
  std::string images_path = find_file(dir, prefix + "-images-idx3-ubyte");
  std::string labels_path = find_file(dir, prefix + "-labels-idx1-ubyte");
  std::vector<int64_t> idims, ldims;
  Dataset d;
  d.pixels = read_idx(images_path, kImagesMagic, idims);
  std::vector<uint8_t> labels = read_idx(labels_path, kLabelsMagic, ldims);
  if (idims[0] != ldims[0]) {
    CNN_THROW("{} holds {} images but {} holds {} labels", images_path, idims[0], labels_path, ldims[0]);
  }
  d.channels = 1;
  d.height = idims[1];
  d.width = idims[2];
  d.labels.assign(labels.begin(), labels.end());
  note += fmt::format("{}{} {}x{}x{} + {}", note.empty() ? "" : ", ",
                      std::filesystem::path(images_path).filename().string(), idims[0], idims[1], idims[2],
                      std::filesystem::path(labels_path).filename().string());
  return d;
}

}  // namespace

DataSplits load_idx(const std::string& dir) {
  if (!std::filesystem::is_directory(dir)) CNN_THROW("{}: not a directory (data.format idx reads a folder)", dir);
  DataSplits s;
  std::string note;
  s.train = read_pair(dir, "train", note);
  s.test = read_pair(dir, "t10k", note);
  s.notes.push_back(fmt::format("source: idx {} ({})", dir, note));
  return s;
}

std::vector<uint8_t> idx_file_bytes(const std::vector<uint8_t>& values, int64_t n, int64_t h, int64_t w) {
  const bool images = h > 0;
  CNN_CHECK(static_cast<int64_t>(values.size()) == (images ? n * h * w : n), "{} values for {} x {} x {}",
            values.size(), n, h, w);
  std::vector<uint8_t> out;
  auto put = [&](uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(v >> s));
  };
  put(images ? kImagesMagic : kLabelsMagic);
  put(static_cast<uint32_t>(n));
  if (images) {
    put(static_cast<uint32_t>(h));
    put(static_cast<uint32_t>(w));
  }
  out.insert(out.end(), values.begin(), values.end());
  return out;
}

}  // namespace cnn
