// Runs the cnn-make-fer2013 program (built by the tools/ target) and reads its output back.
#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/error.h"
#include "data/sources.h"
#include "data_test_util.h"
#include "support/catch.h"
#include "support/test_util.h"

using namespace cnn;

TEST_CASE("cnn-make-fer2013 writes a readable file whose bad rows are reported at the lines it lists", "[cpu]") {
  const std::filesystem::path tool = std::filesystem::path(CNN_BUILD_DIR) / "tools" / "cnn-make-fer2013";
  if (!std::filesystem::exists(tool)) CNN_SKIP("cnn-make-fer2013 is not built (cmake --build . --target cnn-make-fer2013)");
  cnn::test::TempDir dir;
  const std::string csv = (dir / "f.csv").string(), log = (dir / "log.txt").string();
  std::string cmd = tool.string() + " --out " + csv + " --train 30 --val 5 --test 4 --seed 9 --bad-rows 6 > " + log;
  REQUIRE(std::system(cmd.c_str()) == 0);
  const std::string listing = cnn::test::read_text_file(log);
  INFO(listing);
  DataSplits s = load_fer2013_csv(csv, 7, true);
  CHECK(s.train.size() == 30);
  CHECK(s.val.size() == 5);
  CHECK(s.test.size() == 4);
  CHECK(s.bad_skipped == 6);
  // The first bad line the tool lists is the line the reader stops at.
  const size_t at = listing.find("lines:\n  ") + 9;
  const std::string first_line = listing.substr(at, listing.find(' ', at) - at);
  std::string msg = cnn::test::error_of([&] { load_fer2013_csv(csv, 7, false); });
  CHECK(msg.find(csv + ":" + first_line + ": ") != std::string::npos);
  // Same seed, same file.
  std::string again = tool.string() + " --out " + (dir / "g.csv").string() +
                      " --train 30 --val 5 --test 4 --seed 9 --bad-rows 6 > /dev/null";
  REQUIRE(std::system(again.c_str()) == 0);
  CHECK(cnn::test::read_text_file(dir / "g.csv") == cnn::test::read_text_file(csv));
  CHECK(std::system((tool.string() + " --train 3 > /dev/null 2>&1").c_str()) != 0);  // --out is required
}
