// image-folder reader: root/{train,val,test}/<class>/<image>, decoded in parallel through image_io
// (OpenCV) and resized to the model input. Files are sorted, so the order never depends on the file
// system. Trap: hidden entries (".x") are ignored and files without an image extension skipped (both
// noted); a file with an image extension that doesn't decode is a bad row (data.on_bad_row); a
// FIFO, socket or device anywhere in the tree is an error.
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <optional>

#include "core/error.h"
#include "data/data_limits.h"
#include "data/gzip.h"
#include "data/image_io.h"
#include "data/parallel_errors.h"
#include "data/sources.h"
#include "data/stderr_capture.h"

namespace cnn {

namespace fs = std::filesystem;

namespace {

// torchvision's ImageFolder extensions (IMG_EXTENSIONS), compared without case.
bool has_image_extension(const std::string& name) {
  static const char* const kExtensions[] = {".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"};
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) return false;
  std::string ext = name.substr(dot);
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return std::find(std::begin(kExtensions), std::end(kExtensions), ext) != std::end(kExtensions);
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
  return s;
}

// The first few of `v`, then ", ..." when there are more.
std::string join_some(const std::vector<std::string>& v, size_t n = 5) {
  std::vector<std::string> first(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(std::min(v.size(), n)));
  return join(first) + (v.size() > n ? ", ..." : "");
}

const char* kind_of(fs::file_type t) {
  switch (t) {
    case fs::file_type::fifo: return "a FIFO (named pipe)";
    case fs::file_type::socket: return "a socket";
    case fs::file_type::character: return "a character device";
    case fs::file_type::block: return "a block device";
    default: return "not a regular file";
  }
}

// The entries of one folder, sorted by name (the file system's order never matters). Hidden
// entries (".x") are ignored; anything but folders and regular files is refused by name.
struct Listing {
  std::vector<std::string> dirs, files;
};

Listing list_folder(const fs::path& dir) {
  Listing out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name[0] == '.') continue;
    std::error_code sec;
    const fs::file_type t = it->status(sec).type();  // follows symbolic links
    if (t == fs::file_type::directory) {
      out.dirs.push_back(name);
    } else if (t == fs::file_type::regular || t == fs::file_type::not_found) {
      out.files.push_back(name);  // a dangling link fails to open later, naming itself
    } else {
      CNN_THROW("{}: is {}, not a regular file (an image folder holds only folders and regular files)",
                it->path().string(), kind_of(t));
    }
  }
  if (ec) CNN_THROW("{}: cannot list the folder: {}", dir.string(), ec.message());
  std::sort(out.dirs.begin(), out.dirs.end());
  std::sort(out.files.begin(), out.files.end());
  return out;
}

struct Item {
  std::string path;
  int32_t label;
};

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

// The image files of dir/<class>/, labelled; what is not read goes to the split's notes.
std::vector<Item> split_items(const fs::path& dir, const std::vector<std::string>& names,
                              std::vector<std::string>& notes) {
  const Listing top = list_folder(dir);
  std::vector<Item> items;
  std::vector<std::string> non_images, outside, subfolders;
  for (const std::string& f : top.files) (has_image_extension(f) ? outside : non_images).push_back(f);
  for (const std::string& cls : top.dirs) {
    auto it = std::find(names.begin(), names.end(), cls);
    if (it == names.end()) {
      CNN_THROW("{}: class folder '{}' is not one of the classes [{}]{}", (dir / cls).string(), cls, join(names),
                did_you_mean(cls, names));
    }
    const auto label = static_cast<int32_t>(it - names.begin());
    const Listing inside = list_folder(dir / cls);
    for (const std::string& sub : inside.dirs) subfolders.push_back(cls + "/" + sub + "/");
    for (const std::string& file : inside.files) {
      if (has_image_extension(file)) {
        items.push_back({(dir / cls / file).string(), label});
      } else {
        non_images.push_back(cls + "/" + file);
      }
    }
  }
  const std::string where = dir.string();
  if (!non_images.empty()) {
    notes.push_back(fmt::format("skipped {} non-image files in {}: {} (images end in .jpg .jpeg .png .ppm .bmp .pgm "
                                ".tif .tiff .webp, any case)", non_images.size(), where, join_some(non_images)));
  }
  if (!outside.empty()) {
    notes.push_back(fmt::format("skipped {} images outside the class folders of {}: {}", outside.size(), where,
                                join_some(outside)));
  }
  if (!subfolders.empty()) {
    notes.push_back(fmt::format("skipped {} folders inside class folders of {} (not searched): {}", subfolders.size(),
                                where, join_some(subfolders)));
  }
  return items;
}

// Reads dir/<class>/<image> into d (already shaped); bad images go to `bad` ("path: why") when
// skip_bad, else the first one is an error.
void read_split(const fs::path& dir, const std::vector<std::string>& names, bool gray, bool skip_bad, Dataset& d,
                std::vector<std::string>& bad, std::vector<std::string>& notes) {
  const std::vector<Item> items = split_items(dir, names, notes);
  const int64_t n = static_cast<int64_t>(items.size()), sb = d.sample_bytes();
  const std::optional<int64_t> total = checked_product({n, sb});
  if (!total || *total > kMaxDataElements) {
    CNN_THROW("{}: {} images of {} bytes each at the model input exceed the limit of {} bytes for one split "
              "(kMaxDataElements in lib/data/data_limits.h)", dir.string(), n, sb, kMaxDataElements);
  }
  std::vector<uint8_t> pixels(static_cast<size_t>(*total));
  std::vector<std::string> problems(static_cast<size_t>(n));
  ParallelErrors errors;
  std::vector<std::string> messages;
  {
    StderrCapture capture;  // libpng / libjpeg warnings: into the notes, not onto raw stderr
#pragma omp parallel for schedule(dynamic, 16)
    for (int64_t i = 0; i < n; ++i) {
      errors.run(i, [&] {
        problems[i] = decode_image_file(items[i].path, gray, d.channels, d.height, d.width, pixels.data() + i * sb);
      });
    }
    messages = capture.finish();
  }
  if (!messages.empty()) {
    notes.push_back(fmt::format("image decoder messages while reading {} ({} lines, printed by libpng/libjpeg inside "
                                "OpenCV): {}", dir.string(), messages.size(), summarize_lines(messages)));
  }
  errors.rethrow();
  for (int64_t i = 0; i < n; ++i) {
    if (!problems[i].empty()) {
      if (!skip_bad) CNN_THROW("{}: {} (data.on_bad_row: skip skips such files)", items[i].path, problems[i]);
      bad.push_back(items[i].path + ": " + problems[i]);
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
  std::error_code ec;
  if (!fs::exists(root, ec)) CNN_THROW("{}: no such folder {}", spec.path, where_looked(spec.path));
  if (!fs::is_directory(root / "train", ec)) {
    CNN_THROW("{}: no train/ folder (data.format image-folder expects {}/{{train,val,test}}/<class>/<image>)",
              spec.path, spec.path);
  }
  DataSplits s;
  s.class_names = class_names(spec.path, list_folder(root / "train").dirs, classes);
  Dataset* parts[3] = {&s.train, &s.val, &s.test};
  const char* split_names[3] = {"train", "val", "test"};
  std::vector<std::string> bad, split_notes;
  std::string counts;
  for (int k = 0; k < 3; ++k) {
    Dataset& d = *parts[k];
    d.channels = input.channels;
    d.height = input.height;
    d.width = input.width;
    if (!fs::is_directory(root / split_names[k])) continue;
    read_split(root / split_names[k], s.class_names, color == "gray", spec.on_bad_row == "skip", d, bad, split_notes);
    counts += fmt::format("{}{} {}", counts.empty() ? "" : ", ", split_names[k], d.size());
  }
  s.bad_skipped = static_cast<int64_t>(bad.size());
  s.notes.push_back(fmt::format("source: image-folder {} read as {} ({}; {} classes)", spec.path, color, counts,
                                s.class_names.size()));
  s.notes.insert(s.notes.end(), split_notes.begin(), split_notes.end());
  if (!bad.empty()) {
    s.notes.push_back(fmt::format("skipped {} unreadable files (on_bad_row: skip): {}", bad.size(), join_some(bad)));
  }
  return s;
}

}  // namespace cnn
