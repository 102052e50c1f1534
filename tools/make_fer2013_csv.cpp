// cnn-make-fer2013: writes a FER2013-format CSV (emotion,pixels,Usage) of synthetic faces, optionally
// with malformed rows of every kind the reader reports, to exercise its error messages.
// Trap: row i of a split is image i of make_synthetic_faces(seed + split), so files are reproducible.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>

#include "core/error.h"
#include "core/rng.h"
#include "data/image_io.h"
#include "data/sources.h"
#include "data/synthetic_faces.h"

namespace {

// One malformed row of the given kind (0..5), built from a good row.
std::string bad_row(int kind, const std::string& good, std::string& what) {
  const size_t c1 = good.find(','), c2 = good.rfind(',');
  const std::string emotion = good.substr(0, c1), pixels = good.substr(c1 + 1, c2 - c1 - 1), usage = good.substr(c2 + 1);
  const size_t sp = pixels.find(' ');
  switch (kind) {
    case 0: what = "missing Usage field"; return emotion + "," + pixels;
    case 1: what = "non-integer pixel"; return emotion + ",12a" + pixels.substr(sp) + "," + usage;
    case 2: what = "pixel above 255"; return emotion + ",300" + pixels.substr(sp) + "," + usage;
    case 3: what = "2303 pixels"; return emotion + "," + pixels.substr(sp + 1) + "," + usage;
    case 4: what = "emotion 7"; return "7," + pixels + "," + usage;
    default: what = "unknown Usage"; return emotion + "," + pixels + ",Validation";
  }
}

void write_preview(const std::string& path, const cnn::Dataset& d) {
  const int64_t cols = 10, rows = 7, s = 48;
  std::vector<uint8_t> grid(static_cast<size_t>(rows * cols * s * s), 0);
  for (int64_t i = 0; i < std::min(d.size(), rows * cols); ++i) {
    const int64_t gy = i % rows, gx = i / rows;  // one row per class
    for (int64_t y = 0; y < s; ++y)
      for (int64_t x = 0; x < s; ++x) grid[((gy * s + y) * cols * s) + gx * s + x] = d.sample(i)[y * s + x];
  }
  cnn::write_image_file(path, grid.data(), 1, rows * s, cols * s);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Writes a FER2013-format CSV (emotion,pixels,Usage) of synthetic 48x48 faces"};
  std::string out, preview;
  int64_t train = 1000, val = 200, test = 200, bad = 0;
  uint64_t seed = 1;
  app.add_option("--out", out, "CSV file to write")->required();
  app.add_option("--train", train, "Training rows")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--val", val, "PublicTest rows")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--test", test, "PrivateTest rows")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--seed", seed, "Seed of the faces (split s uses seed + s) and of the bad-row positions")
      ->capture_default_str();
  app.add_option("--bad-rows", bad, "Malformed rows to insert, cycling through six kinds")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--preview", preview, "Also write a PNG grid of the first 70 training faces (needs OpenCV)");
  app.set_version_flag("--version", std::string(CNN_VERSION));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  try {
    const int64_t sizes[3] = {train, val, test};
    const char* usage[3] = {"Training", "PublicTest", "PrivateTest"};
    const int64_t total = train + val + test;
    // Bad rows go before good row number pos (0..total), at distinct seeded positions.
    std::multimap<int64_t, int> bad_at;
    cnn::Rng rng(seed, static_cast<uint64_t>(cnn::RngStream::test));
    for (int64_t k = 0; k < bad; ++k) bad_at.emplace(static_cast<int64_t>(rng.below(static_cast<uint64_t>(total + 1))), static_cast<int>(k % 6));
    std::ofstream f(out, std::ios::binary);
    if (!f) CNN_THROW("{}: cannot create", out);
    f << "emotion,pixels,Usage\n";
    int64_t line = 1, row = 0;
    std::vector<std::string> bad_lines;
    auto flush_bad = [&](const std::string& good) {
      auto [lo, hi] = bad_at.equal_range(row);
      for (auto it = lo; it != hi; ++it) {
        std::string what;
        f << bad_row(it->second, good, what) << '\n';
        bad_lines.push_back(std::to_string(++line) + " (" + what + ")");
      }
    };
    std::string last;
    for (int s = 0; s < 3; ++s) {
      cnn::Dataset d = cnn::make_synthetic_faces(sizes[s], 7, 1, 48, 48, seed + static_cast<uint64_t>(s));
      if (s == 0 && !preview.empty()) write_preview(preview, d);
      for (int64_t i = 0; i < d.size(); ++i, ++row) {
        std::string good = cnn::fer2013_csv_row(d.labels[i], d.sample(i), 2304, usage[s]);
        flush_bad(good);
        f << good << '\n';
        ++line;
        last = good;
      }
    }
    if (last.empty()) {  // no good rows: bad rows still need a template
      cnn::Dataset one = cnn::make_synthetic_faces(1, 7, 1, 48, 48, seed);
      last = cnn::fer2013_csv_row(one.labels[0], one.sample(0), 2304, "Training");
    }
    flush_bad(last);
    f.close();
    if (!f) CNN_THROW("{}: write failed", out);
    std::printf("%s: %lld Training, %lld PublicTest, %lld PrivateTest rows", out.c_str(), static_cast<long long>(train),
                static_cast<long long>(val), static_cast<long long>(test));
    if (bad_lines.empty()) {
      std::printf("\n");
    } else {
      std::printf("; %zu malformed rows at lines:\n", bad_lines.size());
    }
    for (const auto& b : bad_lines) std::printf("  %s\n", b.c_str());
    return 0;
  } catch (const cnn::ConfigError& e) {
    std::fprintf(stderr, "cnn-make-fer2013: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cnn-make-fer2013: error: %s\n", e.what());
    return 1;
  }
}
