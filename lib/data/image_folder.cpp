// image-folder reader: root/{train,val,test}/<class>/<image>, decoded in parallel through image_io
// (OpenCV) and resized to the model input. Files are sorted, so the order never depends on the file
// system. Trap: hidden files (".x") are ignored; any other file that doesn't decode is a bad row.
#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "data/image_io.h"
#include "data/sources.h"

namespace cnn {

namespace fs = std::filesystem;

namespace {

std::vector<std::string> sorted_entries(const fs::path& dir, bool want_dirs) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string name = e.path().filename().string();
    if (name.empty() || name[0] == '.') continue;
    if (want_dirs ? e.is_directory() : !e.is_directory()) out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
  return s;
}

struct Item {
  std::string path;
  int32_t label;
};

}  // namespace

namespace {

// The class names in label order: the model's when given (they must equal the train folders as a
// set), else the sorted folder names.
std::vector<std::string> class_names(const std::string& root, const std::vector<std::string>& folders,
                                     const std::vector<std::string>& classes) {
  if (!classes.empty()) {
    std::vector<std::string> missing, extra, want(classes);
    std::sort(want.begin(), want.end());
    std::set_difference(want.begin(), want.end(), folders.begin(), folders.end(), std::back_inserter(missing));
    std::set_difference(folders.begin(), folders.end(), want.begin(), want.end(), std::back_inserter(extra));
    if (!missing.empty() || !extra.empty()) {
      CNN_THROW("{}/train: class folders don't match the model's classes:{}{}", root,
                missing.empty() ? "" : " no folder for [" + join(missing) + "]",
                extra.empty() ? "" : " folders not among the classes [" + join(extra) + "]");
    }
  }
  if (folders.empty()) CNN_THROW("{}/train: no class folders", root);
  return classes.empty() ? folders : classes;
}

// Reads dir/<class>/<image> into d (already shaped); unreadable files go to `bad` when skip_bad.
void read_split(const fs::path& dir, const std::vector<std::string>& names, bool gray, bool skip_bad, Dataset& d,
                std::vector<std::string>& bad) {
  std::vector<Item> items;
  for (const std::string& cls : sorted_entries(dir, true)) {
    auto it = std::find(names.begin(), names.end(), cls);
    if (it == names.end()) {
      CNN_THROW("{}: class folder '{}' is not one of the classes [{}]{}", (dir / cls).string(), cls, join(names),
                did_you_mean(cls, names));
    }
    const auto label = static_cast<int32_t>(it - names.begin());
    for (const std::string& file : sorted_entries(dir / cls, false)) items.push_back({(dir / cls / file).string(), label});
  }
  const int64_t n = static_cast<int64_t>(items.size()), sb = d.sample_bytes();
  std::vector<uint8_t> pixels(static_cast<size_t>(n * sb));
  std::vector<char> ok(static_cast<size_t>(n));
#pragma omp parallel for schedule(dynamic, 16)
  for (int64_t i = 0; i < n; ++i) {
    ok[i] = read_image_file(items[i].path, gray, d.channels, d.height, d.width, pixels.data() + i * sb);
  }
  for (int64_t i = 0; i < n; ++i) {
    if (!ok[i]) {
      if (!skip_bad) {
        CNN_THROW("{}: OpenCV cannot read this image (use data.on_bad_row: skip to skip such files)", items[i].path);
      }
      bad.push_back(items[i].path);
      continue;
    }
    d.pixels.insert(d.pixels.end(), pixels.begin() + i * sb, pixels.begin() + (i + 1) * sb);
    d.labels.push_back(items[i].label);
  }
}

}  // namespace

DataSplits load_image_folder(const DataSpec& spec, const InputSpec& input, const std::vector<std::string>& classes) {
  std::string color = spec.color == "auto" ? (input.channels == 1 ? "gray" : "rgb") : spec.color;
  if (color != "gray" && color != "rgb") {
    throw ConfigError({}, "data.color", fmt::format("expected auto, gray or rgb, found '{}'", spec.color));
  }
  if (color == "rgb" && input.channels != 3) {
    throw ConfigError({}, "data.color", fmt::format("rgb needs input.channels 3, the model has {}", input.channels));
  }
  if (!image_io_available()) {
    throw ConfigError({}, "data.format",
                      fmt::format("image-folder ({}) needs OpenCV, and this build has none: rebuild with "
                                  "-DCNN_WITH_OPENCV=ON, or convert the images to idx or fer2013-csv", spec.path));
  }
  const fs::path root(spec.path);
  if (!fs::is_directory(root / "train")) {
    CNN_THROW("{}: no train/ folder (data.format image-folder expects {}/{{train,val,test}}/<class>/<image>)",
              spec.path, spec.path);
  }
  DataSplits s;
  s.class_names = class_names(spec.path, sorted_entries(root / "train", true), classes);
  Dataset* parts[3] = {&s.train, &s.val, &s.test};
  const char* split_names[3] = {"train", "val", "test"};
  std::vector<std::string> bad;
  std::string counts;
  for (int k = 0; k < 3; ++k) {
    Dataset& d = *parts[k];
    d.channels = input.channels;
    d.height = input.height;
    d.width = input.width;
    if (!fs::is_directory(root / split_names[k])) continue;
    read_split(root / split_names[k], s.class_names, color == "gray", spec.on_bad_row == "skip", d, bad);
    counts += fmt::format("{}{} {}", counts.empty() ? "" : ", ", split_names[k], d.size());
  }
  s.bad_skipped = static_cast<int64_t>(bad.size());
  s.notes.push_back(fmt::format("source: image-folder {} read as {} ({}; {} classes)", spec.path, color, counts,
                                s.class_names.size()));
  if (!bad.empty()) {
    std::vector<std::string> first(bad.begin(), bad.begin() + std::min<size_t>(bad.size(), 5));
    s.notes.push_back(fmt::format("skipped {} unreadable files (on_bad_row: skip): {}{}", bad.size(), join(first),
                                  bad.size() > 5 ? ", ..." : ""));
  }
  return s;
}

}  // namespace cnn
