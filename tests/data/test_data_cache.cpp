// The decoded-data cache (data/data_cache.h) through load_dataset: a hit gives the splits a decode
// gives; a changed source file, a damaged entry and another key are decoded again; `none` writes
// nothing. The test main sets CNN_DATA_CACHE=none for every other test; these set their own.
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "data/data_cache.h"
#include "data/dataset.h"
#include "data/gzip.h"
#include "data/sources.h"
#include "support/catch.h"
#include "data_test_util.h"
#include "support/test_util.h"

using namespace cnn;
namespace fs = std::filesystem;

namespace {

// CNN_DATA_CACHE set for the object's life, then put back.
class CacheEnv {
public:
  explicit CacheEnv(const std::string& value) {
    if (const char* v = std::getenv("CNN_DATA_CACHE")) m_old = v;
    setenv("CNN_DATA_CACHE", value.c_str(), 1);
  }
  ~CacheEnv() {
    if (m_old)
      setenv("CNN_DATA_CACHE", m_old->c_str(), 1);
    else
      unsetenv("CNN_DATA_CACHE");
  }

private:
  std::optional<std::string> m_old;
};

// A FER2013 CSV of n rows a split; pixel j of row i is (i * 7 + j + shift) % 256. One malformed row
// (a pixel of 300) after the first Training row, for on_bad_row: skip.
void write_fer_csv(const fs::path& p, int n, int shift) {
  std::string text = "emotion,pixels,Usage\n";
  std::vector<uint8_t> px(48 * 48);
  int row = 0;
  for (const char* usage : {"Training", "PublicTest", "PrivateTest"})
    for (int i = 0; i < n; ++i, ++row) {
      for (size_t j = 0; j < px.size(); ++j) px[j] = static_cast<uint8_t>((row * 7 + j + shift) % 256);
      text += fer2013_csv_row(row % 7, px.data(), static_cast<int64_t>(px.size()), usage) + "\n";
      if (row == 0) {  // pixel 0 is 300
        std::string bad = "3,300";
        for (int j = 1; j < 48 * 48; ++j) bad += " 0";
        text += bad + ",Training\n";
      }
    }
  test::write_text_file(p, text);
}

DataSpec fer_spec(const fs::path& csv) {
  DataSpec s;
  s.format = "fer2013-csv";
  s.path = csv.string();
  s.on_bad_row = "skip";
  return s;
}

InputSpec gray48() {
  InputSpec in;
  in.channels = 1;
  in.height = 48;
  in.width = 48;
  return in;
}

bool has_note(const DataSplits& s, const std::string& part) {
  for (const std::string& n : s.notes)
    if (n.find(part) != std::string::npos) return true;
  return false;
}

// The splits and everything load_dataset reports, but the cache's own note.
void check_same(const DataSplits& a, const DataSplits& b) {
  CHECK(a.fingerprint == b.fingerprint);
  CHECK(a.class_names == b.class_names);
  CHECK(a.bad_skipped == b.bad_skipped);
  for (auto [x, y] : {std::pair{&a.train, &b.train}, {&a.val, &b.val}, {&a.test, &b.test}}) {
    CHECK(x->pixels == y->pixels);
    CHECK(x->labels == y->labels);
    CHECK(x->channels == y->channels);
  }
  std::vector<std::string> na, nb;
  for (const std::string& n : a.notes)
    if (n.rfind("decoded-data cache:", 0) != 0) na.push_back(n);
  for (const std::string& n : b.notes)
    if (n.rfind("decoded-data cache:", 0) != 0) nb.push_back(n);
  CHECK(na == nb);
}

size_t entries(const fs::path& dir) {
  size_t n = 0;
  std::error_code ec;
  if (fs::is_directory(dir, ec))
    for (const auto& e : fs::directory_iterator(dir)) n += e.path().extension() == ".bin";
  return n;
}

}  // namespace

TEST_CASE("the decoded-data cache gives a fer2013 csv's splits as a decode does", "[cpu]") {
  test::TempDir tmp("cnn-data-cache");
  const fs::path csv = tmp / "fer.csv", cache = tmp / "cache";
  write_fer_csv(csv, 9, 0);
  DataSplits plain;
  {
    CacheEnv off("none");
    plain = load_dataset(fer_spec(csv), gray48(), {});
    CHECK_FALSE(has_note(plain, "decoded-data cache"));
  }
  CHECK(entries(cache) == 0);
  CacheEnv on(cache.string());
  const DataSplits first = load_dataset(fer_spec(csv), gray48(), {});
  CHECK(has_note(first, "decoded-data cache: wrote"));
  CHECK(entries(cache) == 1);
  const DataSplits second = load_dataset(fer_spec(csv), gray48(), {});
  CHECK(has_note(second, "decoded-data cache: read"));
  CHECK(second.bad_skipped == 1);  // the skipped row is reported from the entry as from the file
  check_same(plain, first);
  check_same(plain, second);

  // The same size, other bytes: another key, decoded again (the old entry stays, unused).
  write_fer_csv(csv, 9, 1);
  const DataSplits changed = load_dataset(fer_spec(csv), gray48(), {});
  CHECK(has_note(changed, "decoded-data cache: wrote"));
  CHECK(changed.fingerprint != plain.fingerprint);
  CHECK(entries(cache) == 2);

  // Another on_bad_row is another key: the error a decode meets, not the entry's rows.
  DataSpec strict = fer_spec(csv);
  strict.on_bad_row = "error";
  CHECK_THROWS_WITH(load_dataset(strict, gray48(), {}), Catch::Matchers::Contains("300"));
}

TEST_CASE("a damaged decoded-data cache entry is decoded again and rewritten", "[cpu]") {
  test::TempDir tmp("cnn-data-cache");
  const fs::path csv = tmp / "fer.csv", cache = tmp / "cache";
  write_fer_csv(csv, 5, 3);
  CacheEnv on(cache.string());
  const DataSplits first = load_dataset(fer_spec(csv), gray48(), {});
  REQUIRE(entries(cache) == 1);
  const fs::path entry = fs::directory_iterator(cache)->path();
  for (const std::streamoff at : {std::streamoff(fs::file_size(entry) / 2), std::streamoff(20)}) {
    {  // one byte flipped: in the payload, then in the header
      std::fstream f(entry, std::ios::in | std::ios::out | std::ios::binary);
      f.seekg(at);
      char c = 0;
      f.read(&c, 1);
      c = static_cast<char>(c ^ 0x5a);
      f.seekp(at);
      f.write(&c, 1);
    }
    const DataSplits again = load_dataset(fer_spec(csv), gray48(), {});
    CHECK(has_note(again, "is damaged"));
    CHECK(has_note(again, "wrote"));
    check_same(first, again);
    const DataSplits hit = load_dataset(fer_spec(csv), gray48(), {});
    CHECK(has_note(hit, "decoded-data cache: read"));
  }
  // A FIFO in the entry's place: not opened (it would block), decoded again.
  {
    const fs::path moved = tmp / "entry.bin";
    fs::rename(entry, moved);
    REQUIRE(mkfifo(entry.c_str(), 0600) == 0);
    const DataSplits fifo = load_dataset(fer_spec(csv), gray48(), {});
    CHECK(has_note(fifo, "is not a regular file"));
    check_same(first, fifo);
    fs::remove(entry);
    fs::rename(moved, entry);
  }
  // Cut short: not a whole entry.
  fs::resize_file(entry, fs::file_size(entry) - 9);
  const DataSplits cut = load_dataset(fer_spec(csv), gray48(), {});
  CHECK(has_note(cut, "is not a whole entry"));
  check_same(first, cut);
}

TEST_CASE("the decoded-data cache gives idx splits as a decode does, gzip or not", "[cpu]") {
  test::TempDir tmp("cnn-data-cache");
  const fs::path cache = tmp / "cache";
  for (bool gz : {false, true}) {
    const fs::path dir = tmp / (gz ? "gz" : "raw");
    fs::create_directories(dir);
    test::write_idx_set(dir, 40, 12, 8, 6, gz);
    DataSpec spec;
    spec.format = "idx";
    spec.path = dir.string();
    InputSpec in;
    in.channels = 1;
    in.height = 8;
    in.width = 6;
    DataSplits plain;
    {
      CacheEnv off("none");
      plain = load_dataset(spec, in, {});
    }
    CacheEnv on(cache.string());
    const DataSplits first = load_dataset(spec, in, {}), second = load_dataset(spec, in, {});
    INFO(gz);
    CHECK(has_note(first, "decoded-data cache: wrote"));
    CHECK(has_note(second, "decoded-data cache: read"));
    check_same(plain, first);
    check_same(plain, second);
  }
  CHECK(entries(cache) == 2);  // each folder's files are their own key
}

TEST_CASE("decoded-data cache: a file hashed in pieces hashes as in one piece", "[cpu]") {
  std::vector<uint8_t> bytes(1000);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 13 + 7);
  const uint64_t whole = data_cache_hash(bytes.data(), bytes.size(), 1);
  for (size_t piece : {1, 5, 31, 32, 33, 100, 999}) {
    DataCacheHash h(1);
    for (size_t at = 0; at < bytes.size(); at += piece) h.update(bytes.data() + at, std::min(piece, bytes.size() - at));
    CHECK(h.digest() == whole);
  }
  bytes[500] ^= 1;
  CHECK(data_cache_hash(bytes.data(), bytes.size(), 1) != whole);
  CHECK(data_cache_hash(bytes.data(), 999, 1) != data_cache_hash(bytes.data(), 1000, 1));
}
