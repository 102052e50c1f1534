// Built only without OpenCV (file suffix): image-folder must say why it can't run.
#include <string>

#include "core/error.h"
#include "data/dataset.h"
#include "data/image_io.h"
#include "support/catch.h"
#include "support/test_util.h"

using namespace cnn;

TEST_CASE("image-folder in a build without OpenCV is a config error that says so", "[cpu]") {
  cnn::test::TempDir dir;
  std::filesystem::create_directories(dir / "train" / "cat");
  DataSpec spec;
  spec.format = "image-folder";
  spec.path = dir.path().string();
  CHECK(!image_io_available());
  try {
    load_dataset(spec, InputSpec{1, 8, 8}, {});
    FAIL("no error");
  } catch (const ConfigError& e) {
    CHECK(e.key_path() == "data.format");
    CHECK(std::string(e.what()).find("needs OpenCV, and this build has none") != std::string::npos);
  }
  uint8_t px = 0;
  CHECK_THROWS_AS(write_image_file((dir / "x.png").string(), &px, 1, 1, 1), Error);
}
