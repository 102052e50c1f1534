// Synthetic data takes its class count from the network when the model names no classes, so
// ImageNet-shaped study models (1000 outputs) train without listing 1000 names.
#include "app_util.h"
#include "support/catch.h"
#include "support/test_util.h"

using namespace cnn::test;

TEST_CASE("synthetic data without classes makes as many classes as the final layer", "[cpu]") {
  TempDir dir("cnn-synthetic");
  write_text_file(dir / "m.yaml",
                  "name: three\n"
                  "input: {channels: 3, height: 8, width: 8}\n"
                  "layers:\n"
                  "  - {name: conv1, type: conv2d, filters: 2, kernel: 3, padding: 1}\n"
                  "  - {name: relu1, type: relu}\n"
                  "  - {name: fc, type: dense, units: 3}\n"
                  "data: {format: synthetic, synthetic_size: 12}\n"
                  "train: {epochs: 1, batch_size: 4}\n");
  ProgramResult r = run_program(program_path("cnn-train"), {"m.yaml", "--out", "run", "--quiet"}, dir.path());
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);
  std::string config = read_text_file(dir / "run/config.yaml");
  CHECK_THAT(config, Catch::Matchers::Contains("class2"));
  CHECK_THAT(config, !Catch::Matchers::Contains("angry"));
  CHECK_THAT(r.out, Catch::Matchers::Contains("class0"));
}
