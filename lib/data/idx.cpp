// IDX reader (the MNIST / Fashion-MNIST container: big-endian header, then raw uint8 values).
// Trap: the files may be gzip-compressed under either name; read_file_bytes handles both, but we
// look for "name" before "name.gz" so a stale uncompressed copy wins: the note says which was read.
// The four files are read on four threads at once; their errors surface in the order a reading
// of one file after the other would meet them (read_pair), so a message never depends on timing.
#include <algorithm>
#include <exception>
#include <filesystem>
#include <future>
#include <optional>

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
    std::error_code ec;
    if (fs::exists(p, ec)) return p.string();  // not only regular files: the read refuses the others by name
  }
  CNN_THROW("{}: neither {} nor {}.gz exists (data.format idx expects train-images-idx3-ubyte, "
            "train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte, each optionally .gz)",
            dir, name, name);
}

struct IdxHeader {
  std::vector<int64_t> dims;
  int64_t header_bytes = 0;
  int64_t values = 0;  // the product of dims, checked
};

const char* field_name(bool images, int i) {
  static const char* names[3] = {"number of images", "rows", "columns"};
  return images ? names[i] : "number of labels";
}

// Checks the header at the start of `p` (have bytes: at least the header, or the whole file when
// shorter) without trusting any size in it: the product of the dimensions is overflow-checked and
// capped before anything is sized from it.
IdxHeader check_header(const std::string& path, const uint8_t* p, size_t have, bool images) {
  const uint32_t magic = images ? kImagesMagic : kLabelsMagic;
  const int rank = images ? 3 : 1;
  const char* what = images ? "images" : "labels";
  if (have < 4) CNN_THROW("{}: {} bytes, too short for an idx header (a 4-byte magic number first)", path, have);
  const uint32_t got = be32(p);
  if (got != magic) {
    CNN_THROW("{}: bad magic number 0x{:08x} at byte 0, expected 0x{:08x} (idx {} of unsigned bytes)", path, got,
              magic, what);
  }
  IdxHeader h;
  h.header_bytes = 4 + 4 * int64_t{rank};
  if (static_cast<int64_t>(have) < h.header_bytes) {
    CNN_THROW("{}: {} bytes, too short for the idx {} header of {} bytes (magic number, then {} 4-byte dimensions)",
              path, have, what, h.header_bytes, rank);
  }
  std::string shape;
  int64_t values = 1;
  for (int i = 0; i < rank; ++i) {
    const int64_t d = be32(p + 4 + 4 * i);
    h.dims.push_back(d);
    shape += (i ? " x " : "") + std::to_string(d);
    if (d == 0 && i > 0) CNN_THROW("{}: header field '{}' (byte {}) is 0", path, field_name(images, i), 4 + 4 * i);
    std::optional<int64_t> v = checked_product({values, d});
    if (!v) {
      CNN_THROW("{}: header field '{}' (byte {}): {} values overflow 64-bit size arithmetic", path,
                field_name(images, i), 4 + 4 * i, shape);
    }
    values = *v;
    if (images && i == 2 && checked_product({h.dims[1], h.dims[2]}).value_or(kMaxImagePixels + 1) > kMaxImagePixels) {
      CNN_THROW("{}: header fields 'rows' x 'columns' (bytes 8-15) declare images of {} x {} pixels, above the "
                "limit of {} pixels per image (kMaxImagePixels in lib/data/data_limits.h)", path, h.dims[1],
                h.dims[2], kMaxImagePixels);
    }
    if (values > kMaxDataFileBytes - h.header_bytes) {
      CNN_THROW("{}: header field '{}' (byte {}): {} = {} values, more than the limit of {} bytes for one data "
                "file (kMaxDataFileBytes in lib/data/data_limits.h)", path, field_name(images, i), 4 + 4 * i, shape,
                values, kMaxDataFileBytes);
    }
  }
  h.values = values;
  return h;
}

// The file holds `size` bytes (or more, when `more`): exactly the header plus its values, or an error.
void check_size(const std::string& path, const IdxHeader& h, int64_t size, bool more) {
  const int64_t held = size - h.header_bytes;
  if (held == h.values && !more) return;
  std::string shape;
  for (size_t i = 0; i < h.dims.size(); ++i) shape += (i ? "x" : "") + std::to_string(h.dims[i]);
  CNN_THROW("{}: header says {} values ({}), the file holds {}{} after the {}-byte header", path, h.values, shape,
            more ? "more than " : "", held, h.header_bytes);
}

// Reads one idx file: the header first (checked), then exactly the bytes it announces.
std::vector<uint8_t> read_idx(const std::string& path, bool images, std::vector<int64_t>& dims) {
  const std::vector<uint8_t> head = read_file_head(path, 16);
  const IdxHeader h = check_header(path, head.data(), head.size(), images);
  const int64_t want = h.header_bytes + h.values;
  std::vector<uint8_t> bytes = read_file_head(path, want + 1);  // one more: does the file hold more?
  const bool more = static_cast<int64_t>(bytes.size()) > want;
  check_size(path, h, std::min<int64_t>(static_cast<int64_t>(bytes.size()), want), more);
  dims = h.dims;
  bytes.erase(bytes.begin(), bytes.begin() + h.header_bytes);
  return bytes;
}

}  // namespace

std::vector<uint8_t> parse_idx(const std::string& path, const uint8_t* data, size_t size, bool images,
                               std::vector<int64_t>& dims) {
  const IdxHeader h = check_header(path, data, size, images);
  check_size(path, h, static_cast<int64_t>(size), false);
  dims = h.dims;
  return std::vector<uint8_t>(data + h.header_bytes, data + size);
}

namespace {

// One of the four files, found and read on a thread of its own; the errors are kept, in the
// order a one-file-at-a-time reading would have met them, for read_pair to rethrow.
struct IdxRead {
  std::string path;
  std::vector<uint8_t> values;
  std::vector<int64_t> dims;
  std::exception_ptr find_error, read_error;
};

std::future<IdxRead> start_read(const std::string& dir, const std::string& name, bool images) {
  return std::async(std::launch::async, [dir, name, images] {
    IdxRead r;
    try {
      r.path = find_file(dir, name);
    } catch (...) {
      r.find_error = std::current_exception();
      return r;
    }
    try {
      r.values = read_idx(r.path, images, r.dims);
    } catch (...) {
      r.read_error = std::current_exception();
    }
    return r;
  });
}

// The split from its images and labels, or the first error the files met, in the order: the
// images' file found, the labels' found, the images read, the labels read, the counts.
Dataset read_pair(std::future<IdxRead> images_read, std::future<IdxRead> labels_read, std::string& note) {
  IdxRead im = images_read.get(), lb = labels_read.get();
  for (const std::exception_ptr& e : {im.find_error, lb.find_error, im.read_error, lb.read_error})
    if (e) std::rethrow_exception(e);
  if (im.dims[0] != lb.dims[0]) {
    CNN_THROW("{} holds {} images but {} holds {} labels", im.path, im.dims[0], lb.path, lb.dims[0]);
  }
  Dataset d;
  d.pixels = std::move(im.values);
  d.channels = 1;
  d.height = im.dims[1];
  d.width = im.dims[2];
  d.labels.assign(lb.values.begin(), lb.values.end());
  note += fmt::format("{}{} {}x{}x{} + {}", note.empty() ? "" : ", ", std::filesystem::path(im.path).filename().string(),
                      im.dims[0], im.dims[1], im.dims[2], std::filesystem::path(lb.path).filename().string());
  return d;
}

}  // namespace

std::vector<std::string> idx_source_files(const std::string& dir) {
  std::vector<std::string> files;
  for (const char* name : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                           "t10k-labels-idx1-ubyte"}) {
    try {
      files.push_back(find_file(dir, name));
    } catch (const Error&) {
      return {};
    }
  }
  return files;
}

DataSplits load_idx(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) {
    CNN_THROW("{}: no such directory {} (data.format idx reads a folder of four idx files)", dir, where_looked(dir));
  }
  if (!std::filesystem::is_directory(dir, ec)) CNN_THROW("{}: not a directory (data.format idx reads a folder)", dir);
  // The four files decode at once, each on its own thread (the training images take the longest).
  std::future<IdxRead> train_images = start_read(dir, "train-images-idx3-ubyte", true);
  std::future<IdxRead> test_images = start_read(dir, "t10k-images-idx3-ubyte", true);
  std::future<IdxRead> train_labels = start_read(dir, "train-labels-idx1-ubyte", false);
  std::future<IdxRead> test_labels = start_read(dir, "t10k-labels-idx1-ubyte", false);
  DataSplits s;
  std::string note;
  // A future's destructor waits: the test files' threads end before an error of train's leaves.
  s.train = read_pair(std::move(train_images), std::move(train_labels), note);
  s.test = read_pair(std::move(test_images), std::move(test_labels), note);
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
