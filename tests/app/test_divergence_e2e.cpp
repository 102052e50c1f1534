// A run whose loss becomes NaN/Inf stops with an error naming the step and the first layer whose
// output went non-finite, instead of training on garbage.
#include "app_util.h"
#include "support/catch.h"
#include "support/test_util.h"

using namespace cnn::test;

TEST_CASE("training that diverges stops naming the step and the first non-finite layer", "[cpu]") {
  TempDir dir("cnn-diverge");
  write_text_file(dir / "m.yaml",
                  "name: diverge\n"
                  "input: {channels: 1, height: 12, width: 12}\n"
                  "classes: [a, b, c]\n"
                  "layers:\n"
                  "  - {name: conv1, type: conv2d, filters: 4, kernel: 3, padding: 1}\n"
                  "  - {name: relu1, type: relu}\n"
                  "  - {name: fc, type: dense, units: 3}\n"
                  "data: {format: synthetic, synthetic_size: 64}\n"
                  "train:\n"
                  "  epochs: 3\n"
                  "  batch_size: 16\n"
                  "  optimizer: {type: sgd, lr: 1.0e+30, momentum: 0.0}\n");
  ProgramResult r = run_program(program_path("cnn-train"), {"m.yaml", "--out", "run", "--quiet"}, dir.path());
  INFO(r.describe());
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Matchers::Contains("cnn-train: error: training diverged at step "));
  // After one step with lr 1e30 every weight is ~1e30 but finite; conv1's outputs (~1e30) are
  // still finite, and the dense layer's products (~1e60) overflow first.
  CHECK_THAT(r.err, Catch::Matchers::Contains("the loss is nan; the first non-finite output is in layer 'fc' (dense)"));
}
