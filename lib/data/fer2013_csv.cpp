// FER2013 CSV reader: rows are parsed in parallel (OpenMP) by hand-written integer scanning, a block
// of rows at a time, then gathered in file order so errors and skips are reported the same way on
// any thread count. Trap: line numbers are 1-based and count the header; blank lines are ignored
// but counted.
#include <algorithm>
#include <cctype>
#include <cstring>

#include <filesystem>

#include "core/error.h"
#include "data/gzip.h"
#include "data/parallel_errors.h"
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

// Where the rows go: the three splits, filled in file order, and what was skipped.
struct Gather {
  DataSplits s;
  int64_t counts[3] = {0, 0, 0};
  int64_t bad = 0;
  std::vector<int64_t> bad_lines;  // the first few
  std::string first_error;
};

// Files the parsed rows of one block into their splits in file order; throws at the first bad row
// unless skip_bad.
void gather_block(const std::string& path, const std::vector<int64_t>& line_numbers,
                  const std::vector<RowResult>& results,
                  const std::vector<uint8_t>& pixels,  // (rows, 2304)
                  bool skip_bad, Gather& g) {
  Dataset* parts[3] = {&g.s.train, &g.s.val, &g.s.test};
  for (size_t i = 0; i < results.size(); ++i) {
    const RowResult& r = results[i];
    if (!r.error.empty()) {
      if (!skip_bad) CNN_THROW("{}:{}: {}", path, line_numbers[i], r.error);
      if (g.bad == 0) g.first_error = fmt::format("{}:{}: {}", path, line_numbers[i], r.error);
      if (g.bad_lines.size() < 10) g.bad_lines.push_back(line_numbers[i]);
      ++g.bad;
      continue;
    }
    if (r.blank) continue;
    Dataset& d = *parts[r.split];
    const uint8_t* p = pixels.data() + i * kPixels;
    d.pixels.insert(d.pixels.end(), p, p + kPixels);
    d.labels.push_back(r.label);
    ++g.counts[r.split];
  }
}

DataSplits finish(const std::string& path, const Columns& cols, Gather& g) {
  DataSplits& s = g.s;
  for (Dataset* d : {&s.train, &s.val, &s.test}) {
    d->channels = 1;
    d->height = kSide;
    d->width = kSide;
  }
  s.bad_skipped = g.bad;
  s.notes.push_back(fmt::format("source: fer2013-csv {} ({} rows: Training {}, PublicTest {}, PrivateTest {}{})",
                                path, g.counts[0] + g.counts[1] + g.counts[2], g.counts[0], g.counts[1], g.counts[2],
                                cols.usage < 0 ? "; no Usage column, all rows train" : ""));
  if (g.bad > 0) {
    std::string list;
    for (size_t j = 0; j < g.bad_lines.size(); ++j) list += (j ? ", " : "") + std::to_string(g.bad_lines[j]);
    if (g.bad > static_cast<int64_t>(g.bad_lines.size())) list += ", ...";
    s.notes.push_back(fmt::format("skipped {} malformed rows (on_bad_row: skip), lines {}; first: {}", g.bad, list,
                                  g.first_error));
  }
  return std::move(g.s);
}

}  // namespace

DataSplits parse_fer2013_csv(const std::string& path, const uint8_t* data, size_t size, int64_t num_classes,
                             bool skip_bad) {
  const char* p = reinterpret_cast<const char*>(data);
  const char* const end = p + size;
  auto next_line = [&](const char*& b, const char*& e) {  // [b, e) without the newline; advances p
    b = p;
    const char* nl = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(end - p)));
    e = nl ? nl : end;
    p = nl ? nl + 1 : end;
  };
  if (size == 0) CNN_THROW("{}: empty file (expected a header emotion,pixels,Usage)", path);
  const char *hb, *he;
  next_line(hb, he);
  const Columns cols = parse_header(path, hb, he);

  // Blocks of rows: the index, results and pixels of one block at a time, so memory stays
  // proportional to the rows kept, whatever the file holds (a million blank lines included).
  constexpr size_t kBlock = 4096;
  std::vector<const char*> begins, ends;
  std::vector<int64_t> line_numbers;
  std::vector<RowResult> results;
  std::vector<uint8_t> pixels;
  Gather g;
  int64_t line = 1;
  while (p < end) {
    begins.clear();
    ends.clear();
    line_numbers.clear();
    while (p < end && begins.size() < kBlock) {
      const char *b, *e;
      next_line(b, e);
      ++line;
      if (e == b || (e - b == 1 && *b == '\r')) continue;  // empty: nothing to parse
      begins.push_back(b);
      ends.push_back(e);
      line_numbers.push_back(line);
    }
    const auto rows = static_cast<int64_t>(begins.size());
    results.assign(begins.size(), RowResult{});
    pixels.resize(begins.size() * kPixels);
    ParallelErrors errors;
#pragma omp parallel for schedule(dynamic, 64)
    for (int64_t i = 0; i < rows; ++i) {
      errors.run(i, [&] { parse_row(cols, begins[i], ends[i], num_classes, pixels.data() + i * kPixels, results[i]); });
    }
    errors.rethrow();
    gather_block(path, line_numbers, results, pixels, skip_bad, g);
  }
  return finish(path, cols, g);
}

DataSplits load_fer2013_csv(const std::string& path, int64_t num_classes, bool skip_bad) {
  std::error_code ec;
  if (!path.empty() && !std::filesystem::exists(path, ec)) {
    CNN_THROW("{}: no such file {}. FER2013 is not shipped: datasets/fer2013/README.md (in the cnn-train sources) "
              "says where to download fer2013.csv, or how to make a synthetic stand-in with cnn-make-fer2013",
              path, where_looked(path));
  }
  const std::vector<uint8_t> bytes = read_file_bytes(path);
  return parse_fer2013_csv(path, bytes.data(), bytes.size(), num_classes, skip_bad);
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
