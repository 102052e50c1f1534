// The data files' byte layer (data/gzip.h): gzip integrity, size limits, non-regular files.
#include <sys/stat.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/gzip.h"
#include "data_test_util.h"
#include "gzip_test_util.h"
#include "support/catch.h"
#include "support/test_util.h"

using namespace cnn;
using cnn::test::error_of;

namespace {

std::vector<uint8_t> pattern_bytes(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>((i * 7919) % 251);
  return v;
}

std::string file_text(const std::filesystem::path& p) { return cnn::test::read_text_file(p); }

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("a gzip stream cut short is an error naming the file and the byte offset", "[cpu]") {
  cnn::test::TempDir dir;
  const auto data = pattern_bytes(300000);
  const std::string whole = (dir / "whole.gz").string();
  write_gzip_file(whole, data.data(), data.size());
  REQUIRE(read_file_bytes(whole) == data);
  const std::string gz = file_text(whole);
  for (size_t cut : {gz.size() - 8, gz.size() - 1, gz.size() / 2, size_t{12}}) {
    INFO("cut at " << cut << " of " << gz.size());
    const std::string path = (dir / "cut.gz").string();
    cnn::test::write_text_file(path, gz.substr(0, cut));
    const std::string msg = error_of([&] { read_file_bytes(path); });
    CHECK(contains(msg, path + ": truncated gzip data: the stream ends at byte "));
  }
  // Cut exactly at a deflate block boundary: what decompresses is whole chunks, nothing looks wrong.
  const std::string path = (dir / "blocks.gz").string();
  cnn::test::write_text_file(path, cnn::test::gzip_stored({"row 1\n", "row 2\n"}, false));
  CHECK(contains(error_of([&] { read_file_bytes(path); }), path + ": truncated gzip data"));
  cnn::test::write_text_file(path, cnn::test::gzip_stored({"row 1\n", "row 2\n"}, true));
  const auto ok = read_file_bytes(path);
  CHECK(std::string(ok.begin(), ok.end()) == "row 1\nrow 2\n");
}

TEST_CASE("a gzip stream whose CRC-32 or length check fails is an error naming the file", "[cpu]") {
  cnn::test::TempDir dir;
  const std::string good = cnn::test::gzip_stored({"emotion,pixels\n", "0,1 2 3\n"});
  for (size_t at : {good.size() - 8, good.size() - 1}) {  // a CRC-32 byte, a length byte
    INFO("byte " << at);
    std::string bad = good;
    bad[at] = static_cast<char>(bad[at] ^ 0x40);
    const std::string path = (dir / "bad.csv.gz").string();
    cnn::test::write_text_file(path, bad);
    const std::string msg = error_of([&] { read_file_bytes(path); });
    CHECK(contains(msg, path + ": corrupt gzip data at byte "));
    CHECK(contains(msg, at == good.size() - 8 ? "incorrect data check" : "incorrect length check"));
  }
}

TEST_CASE("concatenated gzip members read as one file, other bytes after a member are an error", "[cpu]") {
  cnn::test::TempDir dir;
  const std::string path = (dir / "two.gz").string();
  cnn::test::write_text_file(path, cnn::test::gzip_stored({"ab"}) + cnn::test::gzip_stored({"cd", "e"}));
  const auto bytes = read_file_bytes(path);
  CHECK(std::string(bytes.begin(), bytes.end()) == "abcde");
  cnn::test::write_text_file(path, cnn::test::gzip_stored({"ab"}) + "junk");
  CHECK(contains(error_of([&] { read_file_bytes(path); }), path + ": unexpected data after the end of gzip member 1"));
}

TEST_CASE("a file above the size limit is an error, checked while decompressing", "[cpu]") {
  cnn::test::TempDir dir;
  const std::vector<uint8_t> zeros(size_t{8} << 20, 0);  // compresses to a few KB
  const std::string gz = (dir / "bomb.gz").string(), plain = (dir / "big.bin").string();
  write_gzip_file(gz, zeros.data(), zeros.size());
  write_file_bytes(plain, zeros.data(), zeros.size());
  CHECK(contains(error_of([&] { read_file_bytes(gz, 1 << 20); }),
                 gz + ": holds more than 1048576 bytes after decompression"));
  CHECK(contains(error_of([&] { read_file_bytes(plain, 1 << 20); }), plain + ": holds more than 1048576 bytes"));
  CHECK(read_file_bytes(gz, int64_t{8} << 20).size() == zeros.size());
  CHECK(read_file_head(gz, 10) == std::vector<uint8_t>(10, 0));
}

TEST_CASE("a FIFO, a directory or a device given as a data file is refused without blocking", "[cpu]") {
  cnn::test::TempDir dir;
  const std::string fifo = (dir / "fifo.csv").string();
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(contains(error_of([&] { read_file_bytes(fifo); }), fifo + ": is a FIFO (named pipe), not a regular file"));
  CHECK(contains(error_of([&] { read_raw_file(fifo, 100); }), "FIFO"));
  CHECK(contains(error_of([&] { read_file_bytes(dir.path().string()); }), "is a directory, not a regular file"));
  if (std::filesystem::exists("/dev/null")) {
    CHECK(contains(error_of([&] { read_file_bytes("/dev/null"); }), "/dev/null: is a character device"));
  }
  const std::string missing = "no-such-dir/x.csv";
  const std::string msg = error_of([&] { read_file_bytes(missing); });
  CHECK(contains(msg, missing + ": cannot open: No such file or directory (looked at " +
                          std::filesystem::absolute(missing).string()));
  CHECK(contains(msg, "relative to the working directory"));
}

TEST_CASE("a gzip file gives the same bytes from disk and memory, whatever its trailer hints", "[cpu]") {
  cnn::test::TempDir dir;
  CHECK(std::string(gzip_inflater()).rfind("zlib ", 0) == 0);  // zlib, with its version
  const auto data = pattern_bytes(700000);
  const std::string one = (dir / "one.gz").string();
  write_gzip_file(one, data.data(), data.size());
  const std::string gz = file_text(one);
  // The same bytes from the file (read_file_bytes) and from memory (decode_file_bytes).
  CHECK(read_file_bytes(one) == data);
  CHECK(decode_file_bytes("mem", reinterpret_cast<const uint8_t*>(gz.data()), gz.size()) == data);
  // Two members: the last trailer says 5 bytes, the file holds 700005; the buffer grows to them.
  const std::string two = (dir / "two.gz").string();
  cnn::test::write_text_file(two, gz + cnn::test::gzip_stored({"tail!"}));
  std::vector<uint8_t> joined = data;
  for (char c : std::string("tail!")) joined.push_back(static_cast<uint8_t>(c));
  CHECK(read_file_bytes(two) == joined);
  // A head read of more bytes than the compressed file holds but fewer than it inflates to.
  const int64_t n = static_cast<int64_t>(gz.size()) + 1000;
  const std::vector<uint8_t> head = read_file_head(two, n);
  CHECK(head == std::vector<uint8_t>(data.begin(), data.begin() + n));
  // One byte over the limit after decompression is still the streaming loop's message.
  CHECK(contains(error_of([&] { read_file_bytes(one, static_cast<int64_t>(data.size()) - 1); }),
                 one + ": holds more than 699999 bytes after decompression"));
  CHECK(read_file_bytes(one, static_cast<int64_t>(data.size())) == data);
  // A length trailer that lies (too large): a length check error, never a read of the wrong size.
  std::string bad = gz;
  bad[bad.size() - 2] = static_cast<char>(bad[bad.size() - 2] ^ 0x10);
  cnn::test::write_text_file(one, bad);
  CHECK(contains(error_of([&] { read_file_bytes(one); }), "incorrect length check"));
}
