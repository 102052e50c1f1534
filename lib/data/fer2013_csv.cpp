// FER2013 CSV reader: rows are parsed in parallel (OpenMP) by hand-written integer scanning, then
// gathered in file order so errors and skips are reported the same way on any thread count.
// Trap: line numbers are 1-based and count the header; blank lines are ignored but counted.
#include <algorithm>
#include <cctype>
#include <cstring>

#include "core/error.h"
#include "data/gzip.h"
#include "data/sources.h"

namespace cnn {

namespace {

constexpr int64_t kSide = 48;
constexpr int64_t kPixels = kSide * kSide;

struct Field {
  const char* begin;
  const char* end;
};

bool is_space(char c) { return c == ' ' || c == '\t'; }

Field trim(Field f) {
  while (f.begin < f.end && is_space(*f.begin)) ++f.begin;
  while (f.end > f.begin && is_space(f.end[-1])) --f.end;
  if (f.end - f.begin >= 2 && *f.begin == '"' && f.end[-1] == '"') {
    ++f.begin;
    --f.end;
  }
  return f;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

struct Columns {
  int emotion = -1, pixels = -1, usage = -1, count = 0;
  std::string header;
};

struct RowResult {
  int32_t label = 0;
  int8_t split = -1;  // 0 train, 1 val, 2 test; -1: blank line or error
  bool blank = false;
  std::string error;
};

Columns parse_header(const std::string& path, const char* b, const char* e) {
  if (e - b >= 3 && std::memcmp(b, "\xEF\xBB\xBF", 3) == 0) b += 3;  // UTF-8 byte order mark
  if (e > b && e[-1] == '\r') --e;
  Columns cols;
  cols.header.assign(b, e);
  const char* p = b;
  for (int i = 0;; ++i) {
    const char* q = std::find(p, e, ',');
    Field f = trim({p, q});
    std::string name = lower(std::string(f.begin, f.end));
    int* slot = name == "emotion" ? &cols.emotion : name == "pixels" ? &cols.pixels : name == "usage" ? &cols.usage
                                                                                                     : nullptr;
    if (!slot || *slot >= 0) {
      CNN_THROW("{}:1: header '{}': {} column '{}' (expected emotion,pixels,Usage or emotion,pixels)", path,
                cols.header, slot ? "repeated" : "unexpected", name);
    }
    *slot = i;
    cols.count = i + 1;
    if (q == e) break;
    p = q + 1;
  }
  if (cols.emotion < 0 || cols.pixels < 0) {
    CNN_THROW("{}:1: header '{}' lacks the {} column (expected emotion,pixels,Usage)", path, cols.header,
              cols.emotion < 0 ? "emotion" : "pixels");
  }
  return cols;
}

// Scans the pixels field into `pixels`; "" or what is wrong. line_begin is for column numbers.
std::string parse_pixels(Field f, const char* line_begin, uint8_t* pixels /* (2304) */) {
  auto column = [&](const char* at) { return static_cast<int64_t>(at - line_begin) + 1; };
  int64_t count = 0;
  for (const char* p = f.begin;;) {
    while (p < f.end && is_space(*p)) ++p;
    if (p == f.end) break;
    const char* tok = p;
    uint32_t v = 0;
    while (p < f.end && static_cast<unsigned>(*p - '0') < 10u) {
      v = std::min<uint32_t>(v * 10 + static_cast<uint32_t>(*p - '0'), 100000);
      ++p;
    }
    if (p == tok || (p < f.end && !is_space(*p))) {
      const char* stop = tok;
      while (stop < f.end && !is_space(*stop)) ++stop;
      return fmt::format("field 'pixels' (column {}): value {} '{}' is not an integer 0-255", column(tok), count + 1,
                         std::string(tok, std::min<const char*>(stop, tok + 20)));
    }
    if (v > 255) {
      return fmt::format("field 'pixels' (column {}): value {} is {}, above 255", column(tok), count + 1,
                         std::string(tok, p));
    }
    if (count < kPixels) pixels[count] = static_cast<uint8_t>(v);
    ++count;
  }
  if (count != kPixels) {
    return fmt::format("field 'pixels' (column {}): {} values, expected {} (48x48)", column(f.begin), count, kPixels);
  }
  return "";
}

// Parses the line [b, e) into `pixels`. Fills r.error instead of throwing (rows are parsed in parallel).
void parse_row(const Columns& cols, const char* b, const char* e, int64_t num_classes,
               uint8_t* pixels,  // (2304)
               RowResult& r) {
  if (e > b && e[-1] == '\r') --e;
  if (trim({b, e}).begin == trim({b, e}).end) {
    r.blank = true;
    return;
  }
  Field fields[3];
  int n = 0;
  for (const char* p = b;;) {
    const char* q = std::find(p, e, ',');
    if (n < 3) fields[n] = trim({p, q});
    ++n;
    if (q == e) break;
    p = q + 1;
  }
  if (n != cols.count) {
    r.error = fmt::format("expected {} fields ({}), found {}", cols.count,
                          cols.count == 3 ? "emotion,pixels,Usage" : "emotion,pixels", n);
    return;
  }
  auto column = [&](const char* at) { return static_cast<int64_t>(at - b) + 1; };
  Field f = fields[cols.emotion];
  int64_t emotion = 0;
  bool digits = f.begin < f.end;
  for (const char* p = f.begin; p < f.end && digits; ++p) {
    digits = *p >= '0' && *p <= '9';
    emotion = std::min<int64_t>(emotion * 10 + (*p - '0'), 1 << 30);
  }
  if (!digits) {
    r.error = fmt::format("field 'emotion' (column {}): '{}' is not a class index", column(f.begin),
                          std::string(f.begin, f.end));
    return;
  }
  if (emotion >= num_classes) {
    r.error = fmt::format("field 'emotion' (column {}): {} is outside [0, {}) (the model has {} classes)",
                          column(f.begin), std::string(f.begin, f.end), num_classes, num_classes);
    return;
  }
  r.label = static_cast<int32_t>(emotion);

  r.error = parse_pixels(fields[cols.pixels], b, pixels);
  if (!r.error.empty()) return;

  if (cols.usage < 0) {
    r.split = 0;
    return;
  }
  f = fields[cols.usage];
  std::string usage(f.begin, f.end);
  r.split = usage == "Training" ? 0 : usage == "PublicTest" ? 1 : usage == "PrivateTest" ? 2 : -1;
  if (r.split < 0) {
    r.error = fmt::format("field 'Usage' (column {}): '{}' is not Training, PublicTest or PrivateTest",
                          column(f.begin), usage);
  }
}

// Moves the parsed rows into their splits in file order; throws at the first bad row unless skip_bad.
DataSplits gather_rows(const std::string& path, const Columns& cols, const std::vector<RowResult>& results,
                       const std::vector<uint8_t>& pixels,  // (rows, 2304)
                       bool skip_bad) {
  const int64_t rows = static_cast<int64_t>(results.size());
  DataSplits s;
  Dataset* parts[3] = {&s.train, &s.val, &s.test};
  int64_t counts[3] = {0, 0, 0};
  std::vector<int64_t> bad_lines;
  std::string first_error;
  for (int64_t i = 0; i < rows; ++i) {
    const RowResult& r = results[i];
    if (r.error.empty()) {
      if (!r.blank) ++counts[r.split];
      continue;
    }
    if (!skip_bad) CNN_THROW("{}:{}: {}", path, i + 2, r.error);
    if (bad_lines.empty()) first_error = fmt::format("{}:{}: {}", path, i + 2, r.error);
    bad_lines.push_back(i + 2);
  }
  for (int k = 0; k < 3; ++k) {
    parts[k]->channels = 1;
    parts[k]->height = kSide;
    parts[k]->width = kSide;
    parts[k]->pixels.reserve(static_cast<size_t>(counts[k] * kPixels));
    parts[k]->labels.reserve(static_cast<size_t>(counts[k]));
  }
  for (int64_t i = 0; i < rows; ++i) {
    const RowResult& r = results[i];
    if (r.split < 0 || !r.error.empty()) continue;
    Dataset& d = *parts[r.split];
    const uint8_t* p = pixels.data() + i * kPixels;
    d.pixels.insert(d.pixels.end(), p, p + kPixels);
    d.labels.push_back(r.label);
  }
  s.bad_skipped = static_cast<int64_t>(bad_lines.size());
  s.notes.push_back(fmt::format("source: fer2013-csv {} ({} rows: Training {}, PublicTest {}, PrivateTest {}{})",
                                path, counts[0] + counts[1] + counts[2], counts[0], counts[1], counts[2],
                                cols.usage < 0 ? "; no Usage column, all rows train" : ""));
  if (!bad_lines.empty()) {
    std::string list;
    for (size_t j = 0; j < std::min<size_t>(bad_lines.size(), 10); ++j) {
      list += (j ? ", " : "") + std::to_string(bad_lines[j]);
    }
    if (bad_lines.size() > 10) list += ", ...";
    s.notes.push_back(fmt::format("skipped {} malformed rows (on_bad_row: skip), lines {}; first: {}",
                                  bad_lines.size(), list, first_error));
  }
  return s;
}

}  // namespace

DataSplits load_fer2013_csv(const std::string& path, int64_t num_classes, bool skip_bad) {
  const std::vector<uint8_t> bytes = read_file_bytes(path);
  const char* text = reinterpret_cast<const char*>(bytes.data());
  const char* end = text + bytes.size();
  std::vector<const char*> starts;  // start of every line; starts.back() is `end`
  for (const char* p = text; p < end;) {
    starts.push_back(p);
    const char* nl = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(end - p)));
    p = nl ? nl + 1 : end;
  }
  if (starts.empty()) CNN_THROW("{}: empty file (expected a header emotion,pixels,Usage)", path);
  starts.push_back(end);
  auto line_end = [&](size_t i) {
    const char* e = starts[i + 1];
    return (e > starts[i] && e[-1] == '\n') ? e - 1 : e;
  };
  const Columns cols = parse_header(path, starts[0], line_end(0));

  const int64_t rows = static_cast<int64_t>(starts.size()) - 2;
  std::vector<uint8_t> pixels(static_cast<size_t>(rows * kPixels));
  std::vector<RowResult> results(static_cast<size_t>(rows));
#pragma omp parallel for schedule(dynamic, 256)
  for (int64_t i = 0; i < rows; ++i) {
    parse_row(cols, starts[i + 1], line_end(i + 1), num_classes, pixels.data() + i * kPixels, results[i]);
  }

  return gather_rows(path, cols, results, pixels, skip_bad);
}

std::string fer2013_csv_row(int64_t emotion, const uint8_t* pixels, int64_t n, const std::string& usage) {
  std::string row = std::to_string(emotion);
  row.reserve(static_cast<size_t>(n) * 4 + 16);
  row += ',';
  for (int64_t i = 0; i < n; ++i) {
    if (i) row += ' ';
    const unsigned v = pixels[i];
    if (v >= 100) row += static_cast<char>('0' + v / 100);
    if (v >= 10) row += static_cast<char>('0' + v / 10 % 10);
    row += static_cast<char>('0' + v % 10);
  }
  if (!usage.empty()) row += "," + usage;
  return row;
}

}  // namespace cnn
