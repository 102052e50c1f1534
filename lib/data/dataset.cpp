// load_dataset's dispatch, val carving, histograms, fingerprints and image conversion.
// Trap: carve_val must not depend on anything but (labels, fraction, seed), or resumed runs
// would silently train on a different split.
#include "data/dataset.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>

#include "core/error.h"
#include "core/rng.h"
#include "data/data_cache.h"
#include "data/data_limits.h"
#include "data/parallel_errors.h"
#include "data/sources.h"
#include "data/synthetic_faces.h"

namespace cnn {

Dataset Dataset::subset(const std::vector<int64_t>& indices) const {
  Dataset out;
  out.channels = channels;
  out.height = height;
  out.width = width;
  const int64_t sb = sample_bytes();
  out.pixels.resize(indices.size() * static_cast<size_t>(sb));
  out.labels.resize(indices.size());
  for (size_t i = 0; i < indices.size(); ++i) {
    CNN_CHECK(indices[i] >= 0 && indices[i] < size(), "index {} outside [0, {})", indices[i], size());
    std::memcpy(out.pixels.data() + i * sb, sample(indices[i]), static_cast<size_t>(sb));
    out.labels[i] = labels[static_cast<size_t>(indices[i])];
  }
  return out;
}

const std::vector<std::string>& fer2013_class_names() {
  static const std::vector<std::string> names{"angry", "disgust", "fear", "happy", "sad", "surprise", "neutral"};
  return names;
}

void convert_image(const uint8_t* src, int64_t sc, int64_t sh, int64_t sw, uint8_t* dst, int64_t dc, int64_t dh,
                   int64_t dw) {
  CNN_CHECK(sc == dc || sc == 1 || (sc == 3 && dc == 1), "cannot convert {} channels to {}", sc, dc);
  std::vector<float> plane(static_cast<size_t>(sh * sw));
  const float ry = static_cast<float>(sh) / static_cast<float>(dh);
  const float rx = static_cast<float>(sw) / static_cast<float>(dw);
  for (int64_t c = 0; c < dc; ++c) {
    const int64_t hw = sh * sw;
    for (int64_t i = 0; i < hw; ++i) {
      if (sc == 3 && dc == 1) {
        plane[i] = 0.299f * src[i] + 0.587f * src[hw + i] + 0.114f * src[2 * hw + i];
      } else {
        plane[i] = src[(sc == 1 ? 0 : c) * hw + i];
      }
    }
    uint8_t* out = dst + c * dh * dw;
    if (sh == dh && sw == dw) {
      for (int64_t i = 0; i < hw; ++i) out[i] = static_cast<uint8_t>(std::lround(std::clamp(plane[i], 0.0f, 255.0f)));
      continue;
    }
    for (int64_t y = 0; y < dh; ++y) {
      float sy = std::clamp((static_cast<float>(y) + 0.5f) * ry - 0.5f, 0.0f, static_cast<float>(sh - 1));
      int64_t y0 = static_cast<int64_t>(sy), y1 = std::min(y0 + 1, sh - 1);
      float fy = sy - static_cast<float>(y0);
      for (int64_t x = 0; x < dw; ++x) {
        float sx = std::clamp((static_cast<float>(x) + 0.5f) * rx - 0.5f, 0.0f, static_cast<float>(sw - 1));
        int64_t x0 = static_cast<int64_t>(sx), x1 = std::min(x0 + 1, sw - 1);
        float fx = sx - static_cast<float>(x0);
        float top = plane[y0 * sw + x0] * (1 - fx) + plane[y0 * sw + x1] * fx;
        float bot = plane[y1 * sw + x0] * (1 - fx) + plane[y1 * sw + x1] * fx;
        out[y * dw + x] = static_cast<uint8_t>(std::lround(std::clamp(top * (1 - fy) + bot * fy, 0.0f, 255.0f)));
      }
    }
  }
}

void convert_dataset(Dataset& d, int64_t channels, int64_t height, int64_t width) {
  if (d.channels == channels && d.height == height && d.width == width) return;
  const int64_t n = d.size();
  const std::optional<int64_t> total = checked_product({n, channels, height, width});
  CNN_CHECK(total && *total <= kMaxDataElements, "{} images of {}x{}x{} exceed the limit of {} bytes for one split",
            n, channels, height, width, kMaxDataElements);
  std::vector<uint8_t> out(static_cast<size_t>(*total));
  const int64_t db = channels * height * width;
  ParallelErrors errors;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    errors.run(i, [&] {
      convert_image(d.sample(i), d.channels, d.height, d.width, out.data() + i * db, channels, height, width);
    });
  }
  errors.rethrow();
  d.pixels = std::move(out);
  d.channels = channels;
  d.height = height;
  d.width = width;
}

void carve_val(DataSplits& splits, double fraction, uint64_t seed) {
  if (fraction < 0.0 || fraction >= 1.0) {
    throw ConfigError({}, "data.val_split", fmt::format("must be in [0, 1), got {}", fraction));
  }
  const Dataset& train = splits.train;
  const int64_t n = train.size();
  const int64_t k = static_cast<int64_t>(splits.class_names.size());
  std::vector<int64_t> hist = class_histogram(train, k);
  const int64_t total = static_cast<int64_t>(std::llround(fraction * static_cast<double>(n)));
  // Largest-remainder apportionment of `total` over the classes.
  std::vector<int64_t> take(static_cast<size_t>(k));
  std::vector<std::pair<double, int64_t>> rem;
  int64_t given = 0;
  for (int64_t c = 0; c < k; ++c) {
    double exact = fraction * static_cast<double>(hist[c]);
    take[c] = static_cast<int64_t>(std::floor(exact));
    given += take[c];
    rem.emplace_back(-(exact - static_cast<double>(take[c])), c);
  }
  std::sort(rem.begin(), rem.end());
  for (size_t i = 0; given < total && i < rem.size(); ++i) {
    int64_t c = rem[i].second;
    if (take[c] < hist[c]) {
      ++take[c];
      ++given;
    }
  }
  // Per class, a Fisher-Yates permutation of its members; the first take[c] go to val.
  std::vector<std::vector<int64_t>> members(static_cast<size_t>(k));
  for (int64_t i = 0; i < n; ++i) members[train.labels[i]].push_back(i);
  Rng rng(seed, static_cast<uint64_t>(RngStream::split));
  std::vector<char> to_val(static_cast<size_t>(n), 0);
  for (int64_t c = 0; c < k; ++c) {
    auto& m = members[c];
    for (int64_t i = static_cast<int64_t>(m.size()) - 1; i > 0; --i) {
      std::swap(m[i], m[rng.below(static_cast<uint64_t>(i + 1))]);
    }
    for (int64_t j = 0; j < take[c]; ++j) to_val[m[j]] = 1;
  }
  std::vector<int64_t> keep, carve;
  for (int64_t i = 0; i < n; ++i) (to_val[i] ? carve : keep).push_back(i);
  splits.val = train.subset(carve);
  // The kept samples move down in place (keep is ascending): no second copy of the training images.
  Dataset& t = splits.train;
  const size_t sb = static_cast<size_t>(t.sample_bytes());
  for (size_t i = 0; i < keep.size(); ++i) {
    const size_t from = static_cast<size_t>(keep[i]);
    if (from == i) continue;
    std::memcpy(t.pixels.data() + i * sb, t.pixels.data() + from * sb, sb);  // from > i: never overlapping
    t.labels[i] = t.labels[from];
  }
  t.pixels.resize(keep.size() * sb);
  t.labels.resize(keep.size());
  splits.notes.push_back(fmt::format(
      "val: carved {} of {} train images (val_split {}, stratified by class, split_seed {})",
      carve.size(), n, fraction, seed));
}

std::vector<int64_t> class_histogram(const Dataset& d, int64_t num_classes) {
  std::vector<int64_t> h(static_cast<size_t>(num_classes), 0);
  for (size_t i = 0; i < d.labels.size(); ++i) {
    int32_t l = d.labels[i];
    CNN_CHECK(l >= 0 && l < num_classes, "label {} of sample {} outside [0, {})", l, i, num_classes);
    ++h[static_cast<size_t>(l)];
  }
  return h;
}

std::string class_histogram_table(const DataSplits& s) {
  const int64_t k = static_cast<int64_t>(s.class_names.size());
  const Dataset* parts[3] = {&s.train, &s.val, &s.test};
  std::vector<int64_t> h[3];
  for (int i = 0; i < 3; ++i) h[i] = class_histogram(*parts[i], k);
  size_t w = 5;
  for (const auto& name : s.class_names) w = std::max(w, name.size());
  std::string out = fmt::format("{:<{}}  {:>8}  {:>8}  {:>8}\n", "class", w, "train", "val", "test");
  for (int64_t c = 0; c < k; ++c) {
    out += fmt::format("{:<{}}  {:>8}  {:>8}  {:>8}\n", s.class_names[c], w, h[0][c], h[1][c], h[2][c]);
  }
  out += fmt::format("{:<{}}  {:>8}  {:>8}  {:>8}\n", "total", w, s.train.size(), s.val.size(), s.test.size());
  return out;
}

static uint64_t hash_bytes(const void* data, size_t n, uint64_t h) {
  const auto* p = static_cast<const uint8_t*>(data);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
  }
  for (; i < n; ++i) h = (h ^ p[i]) * 0x100000001B3ull;
  // splitmix64 finaliser
  h ^= h >> 30;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 27;
  h *= 0x94D049BB133111EBull;
  return h ^ (h >> 31);
}

static std::string split_fingerprint(const Dataset& d) {
  int64_t dims[3] = {d.channels, d.height, d.width};
  uint64_t h = hash_bytes(dims, sizeof dims, 0x6A09E667F3BCC908ull);
  h = hash_bytes(d.labels.data(), d.labels.size() * sizeof(int32_t), h);
  h = hash_bytes(d.pixels.data(), d.pixels.size(), h);
  return fmt::format("{}:{:016x}", d.size(), h);
}

std::string dataset_fingerprint(const DataSplits& s) {
  return fmt::format("train={};val={};test={}", split_fingerprint(s.train), split_fingerprint(s.val),
                     split_fingerprint(s.test));
}

static DataSplits load_synthetic(const DataSpec& spec, const InputSpec& input, int64_t num_classes) {
  DataSplits s;
  const int64_t n = spec.synthetic_size, n_small = std::max<int64_t>(1, spec.synthetic_size / 4);
  if (n < 1) throw ConfigError({}, "data.synthetic_size", fmt::format("must be at least 1, got {}", n));
  s.train = make_synthetic_faces(n, num_classes, input.channels, input.height, input.width, spec.split_seed);
  s.val = make_synthetic_faces(n_small, num_classes, input.channels, input.height, input.width, spec.split_seed + 1);
  s.test = make_synthetic_faces(n_small, num_classes, input.channels, input.height, input.width, spec.split_seed + 2);
  s.notes.push_back(fmt::format(
      "source: synthetic {} (train {}, val and test synthetic_size/4 = {}, seeds split_seed+0/1/2 = {}/{}/{})",
      num_classes == 7 && input.channels == 1 ? "faces" : "class patterns", n, n_small, spec.split_seed,
      spec.split_seed + 1, spec.split_seed + 2));
  return s;
}

static std::vector<std::string> default_names(int64_t k) {
  std::vector<std::string> out;
  for (int64_t c = 0; c < k; ++c) out.push_back(fmt::format("class{}", c));
  return out;
}

static int64_t max_label_plus_one(const DataSplits& s) {
  int64_t m = 0;
  for (const Dataset* d : {&s.train, &s.val, &s.test}) {
    for (int32_t l : d->labels) m = std::max<int64_t>(m, int64_t{l} + 1);
  }
  return m;
}

// A file-based source through the decoded-data cache (data_cache.h): the key is `what` (the format
// and the settings its decoding depends on) with each source file's absolute path, size and hash of
// its bytes. No files (one is missing: `load` says so), one that is not a regular file, over the
// size limit or cannot be read whole, or the cache off: `load` alone, whose error is the reader's.
// A hit, a write or a failed write adds a note.
static DataSplits load_through_cache(const std::string& what, const std::vector<std::string>& files,
                                     const std::function<DataSplits()>& load) {
  const std::string dir = data_cache_dir();
  if (dir.empty() || files.empty()) return load();
  std::string key = "cnn-train decoded data v1\n" + what + "\n";
  for (const std::string& f : files) {
    uint64_t size = 0, hash = 0;
    std::error_code ec;
    if (!std::filesystem::is_regular_file(f, ec)) return load();
    // A file over the limit is the reader's error to give: not hashed first.
    const uintmax_t bytes = std::filesystem::file_size(f, ec);
    if (ec || bytes > static_cast<uintmax_t>(kMaxDataFileBytes) || !data_cache_hash_file(f, size, hash)) return load();
    const std::filesystem::path abs = std::filesystem::absolute(f, ec);
    if (ec) return load();
    key += fmt::format("file {} bytes {} hash {:016x}\n", abs.string(), size, hash);
  }
  std::string why;
  if (std::optional<DataSplits> hit = data_cache_read(dir, key, why)) {
    hit->notes.push_back(fmt::format("decoded-data cache: read {} (the source files' bytes are unchanged)",
                                     data_cache_file(dir, key)));
    return std::move(*hit);
  }
  const std::string miss = why == "no entry" ? std::string() : why + "; ";
  DataSplits s = load();
  if (data_cache_write(dir, key, s, why))
    s.notes.push_back(fmt::format("decoded-data cache: {}wrote {}", miss, data_cache_file(dir, key)));
  else
    s.notes.push_back(fmt::format("decoded-data cache: {}not written: {}", miss, why));
  // The note just added is not in the entry: a later hit says it read the entry instead.
  return s;
}

DataSplits load_dataset(const DataSpec& spec, const InputSpec& input, const std::vector<std::string>& classes) {
  if (input.channels != 1 && input.channels != 3) {
    throw ConfigError({}, "input.channels", fmt::format("data loaders read 1 (gray) or 3 (RGB) channels, got {}",
                                                        input.channels));
  }
  if (input.height < 1 || input.width < 1) {
    throw ConfigError({}, "input", fmt::format("height and width must be positive, got {}x{}", input.height,
                                               input.width));
  }
  const std::optional<int64_t> pixels = checked_product({input.height, input.width});
  if (!pixels || *pixels > kMaxImagePixels) {
    throw ConfigError({}, "input", fmt::format("{} x {} pixels per image is above the data loaders' limit of {} "
                                               "(kMaxImagePixels in lib/data/data_limits.h)", input.height,
                                               input.width, kMaxImagePixels));
  }
  if (spec.on_bad_row != "error" && spec.on_bad_row != "skip") {
    throw ConfigError({}, "data.on_bad_row", fmt::format("expected error or skip, found '{}'", spec.on_bad_row));
  }
  const bool skip_bad = spec.on_bad_row == "skip";
  const std::vector<std::string> formats{"fer2013-csv", "idx", "image-folder", "synthetic"};
  DataSplits s;
  if (spec.format == "fer2013-csv") {
    const auto& names = classes.empty() ? fer2013_class_names() : classes;
    const int64_t k = static_cast<int64_t>(names.size());
    s = load_through_cache(fmt::format("format fer2013-csv classes {} on_bad_row {}", k, spec.on_bad_row), {spec.path},
                           [&] { return load_fer2013_csv(spec.path, k, skip_bad); });
    s.class_names = names;
  } else if (spec.format == "idx") {
    s = load_through_cache("format idx", idx_source_files(spec.path), [&] { return load_idx(spec.path); });
    int64_t k = max_label_plus_one(s);
    if (!classes.empty()) {
      if (k > static_cast<int64_t>(classes.size())) {
        CNN_THROW("{}: labels go up to {} but the model has {} classes (the *-labels-idx1-ubyte files hold class "
                  "indices 0..K-1)", spec.path, k - 1, classes.size());
      }
    }
    s.class_names = classes.empty() ? default_names(k) : classes;
  } else if (spec.format == "image-folder") {
    s = load_image_folder(spec, input, classes);
  } else if (spec.format == "synthetic") {
    const auto& names = classes.empty() ? fer2013_class_names() : classes;
    s = load_synthetic(spec, input, static_cast<int64_t>(names.size()));
    s.class_names = names;
  } else {
    throw ConfigError({}, "data.format", fmt::format("unknown format '{}' (known: fer2013-csv, idx, image-folder, "
                                                     "synthetic){}", spec.format, did_you_mean(spec.format, formats)));
  }
  for (Dataset* d : {&s.train, &s.val, &s.test}) {
    if (d->channels == 0) {  // an absent split: give it the model's geometry
      d->channels = input.channels;
      d->height = input.height;
      d->width = input.width;
    }
    convert_dataset(*d, input.channels, input.height, input.width);
  }
  if (s.train.size() == 0) CNN_THROW("{}: no training images", spec.path);
  if (s.val.size() == 0) carve_val(s, spec.val_split, spec.split_seed);
  if (s.test.size() == 0) s.notes.push_back("test: the source has no test split");
  s.notes.push_back(fmt::format("sizes: train {}, val {}, test {} at {}x{}x{}", s.train.size(), s.val.size(),
                                s.test.size(), input.channels, input.height, input.width));
  s.fingerprint = dataset_fingerprint(s);
  return s;
}

DataSplits load_dataset(const ModelSpec& model, const std::vector<std::string>& classes) {
  try {
    return load_dataset(model.data, model.input, classes);
  } catch (const ConfigError& e) {
    if (!e.where().file.empty() || e.where().line != 0) throw;
    throw ConfigError({model.file}, e.key_path(), e.message());
  }
}

}  // namespace cnn
