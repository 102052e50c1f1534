// Image headers (data/image_header.h) against files OpenCV writes, and the pixel limit applied
// before decoding (data/image_io.h). Built only with OpenCV (file suffix): the files come from it.
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/data_limits.h"
#include "data/image_header.h"
#include "data/image_io.h"
#include "data_test_util.h"
#include "gzip_test_util.h"
#include "support/catch.h"
#include "support/test_util.h"

using namespace cnn;
using cnn::test::error_of;
namespace fs = std::filesystem;

namespace {

// A w x h image with a gradient (gray for .pgm, else RGB), written through OpenCV in the format of
// `name`'s extension.
std::string encoded(const fs::path& dir, const std::string& name, int64_t w, int64_t h) {
  const int64_t c = fs::path(name).extension() == ".pgm" ? 1 : 3;
  std::vector<uint8_t> planes(static_cast<size_t>(c * w * h));
  for (size_t i = 0; i < planes.size(); ++i) planes[i] = static_cast<uint8_t>(i * 3 % 256);
  const fs::path p = dir / name;
  write_image_file(p.string(), planes.data(), c, h, w);
  return cnn::test::read_text_file(p);
}

void put_be(std::string& s, size_t at, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) s[at + i] = static_cast<char>((v >> (8 * (bytes - 1 - i))) & 0xff);
}
void put_le(std::string& s, size_t at, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) s[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

// The PNG with IHDR's width and height replaced, its CRC recomputed (so libpng would accept it).
std::string png_declaring(std::string png, uint32_t w, uint32_t h) {
  put_be(png, 16, w, 4);
  put_be(png, 20, h, 4);
  put_be(png, 29, cnn::test::crc32_of(png.data() + 12, 17), 4);  // over "IHDR" and its 13 bytes
  return png;
}

// The JPEG with its first SOFn frame header's height and width replaced.
std::string jpeg_declaring(std::string jpg, uint16_t w, uint16_t h) {
  for (size_t i = 2; i + 9 < jpg.size();) {
    const auto m = static_cast<uint8_t>(jpg[i + 1]);
    const size_t len = (static_cast<uint8_t>(jpg[i + 2]) << 8) | static_cast<uint8_t>(jpg[i + 3]);
    if (m >= 0xC0 && m <= 0xC3) {
      put_be(jpg, i + 5, h, 2);
      put_be(jpg, i + 7, w, 2);
      return jpg;
    }
    i += 2 + len;
  }
  FAIL("no SOF marker in the JPEG OpenCV wrote");
  return jpg;
}

ImageHeader header_of(const std::string& bytes) {
  ImageHeader h;
  const std::string problem =
      read_image_header(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), h);
  INFO(problem);
  CHECK(problem.empty());
  return h;
}

}  // namespace

TEST_CASE("image headers give the size OpenCV encoded, for every format it writes here", "[cpu]") {
  cnn::test::TempDir dir;
  const std::vector<std::pair<std::string, std::string>> files{
      {"a.png", "PNG"}, {"a.jpg", "JPEG"}, {"a.bmp", "BMP"}, {"a.ppm", "PNM"},
      {"a.pgm", "PNM"}, {"a.tif", "TIFF"}, {"a.webp", "WebP"}};
  for (const auto& [name, format] : files) {
    INFO(name);
    std::string bytes;
    try {
      bytes = encoded(dir.path(), name, 37, 23);
    } catch (const Error& e) {
      WARN("OpenCV here cannot write " << name << ": " << e.what());
      continue;
    }
    const ImageHeader h = header_of(bytes);
    CHECK(h.format == format);
    CHECK(h.width == 37);
    CHECK(h.height == 23);
    // Every prefix of the file is refused or parsed without reading past it (ASan builds check).
    for (size_t n = 0; n < std::min<size_t>(bytes.size(), 400); ++n) {
      ImageHeader p;
      read_image_header(reinterpret_cast<const uint8_t*>(bytes.data()), n, p);
    }
  }
}

TEST_CASE("image header text formats and odd layouts parse, and other content is refused", "[cpu]") {
  CHECK(header_of("P5\n# comment\n 640\t480\n255\n").width == 640);
  CHECK(header_of("P7\nWIDTH 12\nHEIGHT 34\nDEPTH 1\nMAXVAL 255\nENDHDR\n").height == 34);
  std::string bmp(30, '\0');
  bmp[0] = 'B', bmp[1] = 'M';
  put_le(bmp, 14, 40, 4);
  put_le(bmp, 18, 5, 4);
  put_le(bmp, 22, static_cast<uint32_t>(-7), 4);  // negative height: rows stored top-down
  CHECK(header_of(bmp).height == 7);
  ImageHeader h;
  auto problem = [&](const std::string& s) {
    return read_image_header(reinterpret_cast<const uint8_t*>(s.data()), s.size(), h);
  };
  CHECK(problem("GIF89a....") .find("not a PNG, JPEG, BMP, PNM, TIFF or WebP image (first bytes 47 49 46") == 0);
  CHECK(problem("") == "empty file");
  CHECK(problem("P5\n0 10\n255\n").find("declares 0 x 10 pixels") != std::string::npos);
  CHECK(!problem("\x89PNG\r\n\x1a\n").empty());
  CHECK(!problem("\xFF\xD8\xFF\xD9").empty());
  CHECK(!problem(std::string("II*\0\xff\xff\xff\x7f", 8)).empty());
}

TEST_CASE("an image that declares more pixels than the limit is refused before decoding, naming the file", "[cpu]") {
  cnn::test::TempDir dir;
  // 30000 x 30000 = 900 megapixels: the decoder would allocate 900 MB (gray) before failing.
  const std::vector<std::pair<std::string, std::string>> bombs{
      {"bomb.png", png_declaring(encoded(dir.path(), "src.png", 8, 8), 30000, 30000)},
      {"bomb.jpg", jpeg_declaring(encoded(dir.path(), "src.jpg", 8, 8), 30000, 30000)},
      {"bomb.pgm", "P5\n30000 30000\n255\n" + std::string(64, '\x80')},
  };
  for (const auto& [name, bytes] : bombs) {
    INFO(name);
    const fs::path p = dir / name;
    cnn::test::write_text_file(p, bytes);
    std::vector<uint8_t> dst(8 * 8);
    CHECK(decode_image_file(p.string(), true, 1, 8, 8, dst.data())
              .find("header declares 30000 x 30000 pixels, above the limit of 67108864 pixels (64 megapixels)") !=
          std::string::npos);
    const std::string msg = error_of([&] { read_image_file(p.string(), true, 1, 8, 8, dst.data()); });
    CHECK(msg.find(p.string() + ": ") == 0);
    CHECK(msg.find("refused before decoding") != std::string::npos);
  }
  // The same file at its real size decodes.
  const fs::path ok = dir / "ok.png";
  cnn::test::write_text_file(ok, png_declaring(encoded(dir.path(), "src.png", 8, 8), 8, 8));
  std::vector<uint8_t> dst(8 * 8);
  CHECK(decode_image_file(ok.string(), true, 1, 8, 8, dst.data()).empty());
}
