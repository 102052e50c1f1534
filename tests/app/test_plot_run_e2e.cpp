// tools/plot_run.py on a real run: a tiny training run, its cnn-eval report, then the script run
// with Debian's /usr/bin/python3 (python3-matplotlib); the PNG files it writes must be valid PNGs.
#include <cstdlib>
#include <string>

#include "app/app_util.h"
#include "support/catch.h"
#include "support/test_util.h"

using namespace cnn;
using namespace cnn::test;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

TEST_CASE("plot_run.py writes loss, accuracy and learning-rate curves and a confusion matrix as PNG files", "[cpu]") {
  if (std::system("/usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1") != 0)
    CNN_SKIP("/usr/bin/python3 with python3-matplotlib is not installed");
  TempDir dir("cnn-plot-e2e");
  const std::string run_dir = (dir / "run").string(), report = (dir / "report.json").string();
  ProgramResult t = run_program(program_path("cnn-train"), {std::string(CNN_SOURCE_DIR) + "/models/tiny.yaml", "--out", run_dir, "--device", "cpu",
                                 "--epochs", "2", "--set", "data.synthetic_size=64", "--quiet"});
  INFO(t.describe());
  REQUIRE(t.exit_code == 0);
  ProgramResult e = run_program(program_path("cnn-eval"), {run_dir, "--json", report, "--quiet"});
  INFO(e.describe());
  REQUIRE(e.exit_code == 0);
  const std::string script = std::string(CNN_SOURCE_DIR) + "/tools/plot_run.py";
  ProgramResult p = run_program("/usr/bin/python3", {script, run_dir, "--report", report});
  INFO(p.describe());
  REQUIRE(p.exit_code == 0);
  CHECK(png_problem(dir / "run" / "curves.png") == "");
  CHECK(png_problem(dir / "run" / "confusion.png") == "");
  CHECK_THAT(p.out, Contains("wrote " + run_dir + "/curves.png"));

  // Without a report and no confusion matrix in metrics.jsonl: curves only, and a hint.
  fs::remove(dir / "run" / "confusion.png");
  ProgramResult q = run_program("/usr/bin/python3", {script, run_dir, "--out", (dir / "figs").string()});
  INFO(q.describe());
  CHECK(q.exit_code == 0);
  CHECK(png_problem(dir / "figs" / "curves.png") == "");
  CHECK_THAT(q.out, Contains("--report"));

  ProgramResult missing = run_program("/usr/bin/python3", {script, (dir / "nothing").string()});
  CHECK(missing.exit_code == 1);
  CHECK_THAT(missing.err, Contains("plot_run.py: error: cannot read"));
}
