// libFuzzer target for the FER2013 CSV reader behind data.format fer2013-csv, gzip layer included:
// any bytes must parse or throw cnn::Error (anything else escaping, a crash or a sanitizer report is
// a finding), and what it accepts must come back the same when written out as CSV and read again.
#include <string>
#include <vector>

#include "core/error.h"
#include "data/gzip.h"
#include "data/sources.h"
#include "fuzz_util.h"

using namespace cnn;

namespace {

constexpr int64_t kClasses = 7;
constexpr int64_t kLimit = int64_t{4} << 20;  // decompressed bytes: keeps gzip bombs small

[[noreturn]] void finding(const char* what) { fuzz::finding("fuzz_fer2013_csv", what); }

std::string row(int64_t emotion, int seed, const std::string& usage) {
  std::vector<uint8_t> p(2304);
  for (size_t j = 0; j < p.size(); ++j) p[j] = static_cast<uint8_t>((j * 7 + static_cast<size_t>(seed) * 13) % 256);
  return fer2013_csv_row(emotion, p.data(), 2304, usage) + "\n";
}

void write_seeds(const std::string& dir) {
  const std::string three = "emotion,pixels,Usage\n" + row(3, 1, "Training") + row(0, 2, "PublicTest") +
                            row(6, 3, "PrivateTest");
  const std::string two = "emotion,pixels\r\n" + row(1, 4, "") + "\r\n";
  const std::string bad = "emotion,pixels,Usage\n7,1 2 3,Training\n\n" + row(2, 5, "Other");
  write_file_bytes(dir + "/seed-0.csv", three.data(), three.size());
  write_file_bytes(dir + "/seed-1.csv", two.data(), two.size());
  write_file_bytes(dir + "/seed-2.csv", bad.data(), bad.size());
  write_gzip_file(dir + "/seed-3.csv.gz", three.data(), three.size());
}

std::string to_csv(const DataSplits& s) {
  std::string out = "emotion,pixels,Usage\n";
  const Dataset* parts[3] = {&s.train, &s.val, &s.test};
  const char* usage[3] = {"Training", "PublicTest", "PrivateTest"};
  for (int k = 0; k < 3; ++k) {
    for (int64_t i = 0; i < parts[k]->size(); ++i) {
      out += fer2013_csv_row(parts[k]->labels[static_cast<size_t>(i)], parts[k]->sample(i), 2304, usage[k]) + "\n";
    }
  }
  return out;
}

void check(const DataSplits& s) {
  for (const Dataset* d : {&s.train, &s.val, &s.test}) {
    if (d->channels != 1 || d->height != 48 || d->width != 48) finding("a split is not 1x48x48");
    if (d->pixels.size() != d->labels.size() * 2304) finding("pixels and labels disagree");
    for (int32_t l : d->labels) {
      if (l < 0 || l >= kClasses) finding("a label outside the classes");
    }
  }
}

}  // namespace

CNN_FUZZ_SEEDS(write_seeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> text;
  if (!fuzz::accepted([&] { text = decode_file_bytes("fuzz.csv", data, size, kLimit); })) return 0;
  for (bool skip_bad : {false, true}) {
    DataSplits s;
    if (!fuzz::accepted([&] { s = parse_fer2013_csv("fuzz.csv", text.data(), text.size(), kClasses, skip_bad); })) {
      continue;
    }
    check(s);
    const std::string again_text = to_csv(s);
    const DataSplits again = parse_fer2013_csv("again.csv", reinterpret_cast<const uint8_t*>(again_text.data()),
                                               again_text.size(), kClasses, false);
    const Dataset* a[3] = {&s.train, &s.val, &s.test};
    const Dataset* b[3] = {&again.train, &again.val, &again.test};
    for (int k = 0; k < 3; ++k) {
      if (a[k]->labels != b[k]->labels || a[k]->pixels != b[k]->pixels) finding("rewrite changed a split");
    }
  }
  return 0;
}
