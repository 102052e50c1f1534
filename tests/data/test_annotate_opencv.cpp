// Built only with OpenCV (file suffix): boxes and labels drawn by annotated_image (data/annotate.h),
// and the Image helpers of image_io.h it builds on.
#include <string>

#include "data/annotate.h"
#include "data/image_io.h"
#include "support/catch.h"
#include "support/test_util.h"

using namespace cnn;

namespace {

Image flat_gray(int64_t w, int64_t h, uint8_t v) {
  Image img;
  img.width = w, img.height = h, img.channels = 1;
  img.pixels.assign(size_t(w * h), v);
  return img;
}

const uint8_t* rgb_at(const Image& img, int64_t x, int64_t y) { return img.pixels.data() + (y * img.width + x) * 3; }

}  // namespace

TEST_CASE("annotated_image draws every box and label in colour and leaves the rest of the image alone", "[cpu]") {
  const Image img = flat_gray(300, 200, 50);
  const std::vector<BoxLabel> labels{{{40, 60, 80, 80}, "happy 87.3%"}, {{200, 0, 60, 60}, "sad 51.0%"}};
  const Image out = annotated_image(img, labels);
  REQUIRE(out.channels == 3);
  REQUIRE(out.width == 300);
  REQUIRE(out.height == 200);
  // The box edges are green (the image is RGB).
  for (const BoxLabel& l : labels) {
    const uint8_t* edge = rgb_at(out, l.box.x + l.box.width / 2, l.box.y + l.box.height - 1);
    CHECK(int(edge[0]) == 0);
    CHECK(int(edge[1]) == 255);
    CHECK(int(edge[2]) == 0);
  }
  // A label strip above the first box; the second touches the top, so its strip is inside it.
  CHECK(int(rgb_at(out, 42, 50)[1]) != 50);
  CHECK(int(rgb_at(out, 205, 5)[1]) != 50);
  // Far from every box and strip nothing changed.
  for (auto [x, y] : {std::pair<int64_t, int64_t>{5, 195}, {150, 150}, {290, 100}}) {
    const uint8_t* p = rgb_at(out, x, y);
    CHECK((int(p[0]) == 50 && int(p[1]) == 50 && int(p[2]) == 50));
  }
}

TEST_CASE("read_image, resize_region and write_image agree with the plane readers", "[cpu]") {
  cnn::test::TempDir dir;
  std::vector<uint8_t> planes(3 * 30 * 40);  // (3, 30, 40)
  for (size_t i = 0; i < planes.size(); ++i) planes[i] = uint8_t((i * 7) % 251);
  const std::string path = (dir / "a.png").string();
  write_image_file(path, planes.data(), 3, 30, 40);
  const Image img = read_image(path, false);
  REQUIRE(img.channels == 3);
  REQUIRE(img.width == 40);
  REQUIRE(img.height == 30);
  CHECK(int(img.pixels[(2 * 40 + 5) * 3 + 1]) == int(planes[(1 * 30 + 2) * 40 + 5]));  // G at (5, 2): RGB order
  // The whole image resized is what read_image_file gives; a region is its pixels.
  std::vector<uint8_t> got(3 * 12 * 16), want(3 * 12 * 16);
  resize_region(img, 0, 0, 40, 30, 3, 12, 16, got.data());
  REQUIRE(read_image_file(path, false, 3, 12, 16, want.data()));
  CHECK(got == want);
  std::vector<uint8_t> region(3 * 4 * 5);
  resize_region(img, 10, 20, 5, 4, 3, 4, 5, region.data());
  CHECK(int(region[(2 * 4 + 1) * 5 + 3]) == int(planes[(2 * 30 + 21) * 40 + 13]));
  CHECK_THROWS_WITH(resize_region(img, 38, 0, 5, 4, 3, 4, 5, region.data()),
                    Catch::Matchers::Contains("does not lie inside the 40x30 image"));
  // Luma of the gray image of a gray picture is the picture; write_image round-trips.
  const Image gray = gray_image(img);
  CHECK(gray.channels == 1);
  write_image((dir / "b.png").string(), img);
  CHECK(read_image((dir / "b.png").string(), false).pixels == img.pixels);
}
