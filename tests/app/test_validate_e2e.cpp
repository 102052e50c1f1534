// `cnn-train validate`: the key reference it prints is the README's copy (so the two cannot
// drift), and hostile model files are refused at the key with exit 2 instead of passing (and
// later wrapping, narrowing or allocating without bound).
#include <filesystem>
#include <string>

#include "app_util.h"
#include "support/catch.h"
#include "support/test_util.h"

using namespace cnn::test;

namespace {

const std::string kBegin = "<!-- BEGIN cnn-train validate --keys -->\n";
const std::string kEnd = "<!-- END cnn-train validate --keys -->";

ProgramResult validate(const std::string& yaml) {
  TempDir dir;
  write_text_file(dir / "m.yaml", yaml);
  return run_program(program_path("cnn-train"), {"validate", "m.yaml"}, dir.path());
}

const std::string kHead = "name: t\ninput: {channels: 1, height: 8, width: 8}\nlayers:\n";

}  // namespace

TEST_CASE("the README's model file reference is what cnn-train validate --keys prints", "[cpu]") {
  ProgramResult r = run_program(program_path("cnn-train"), {"validate", "--keys"});
  REQUIRE(r.exit_code == 0);
  const std::string readme = read_text_file(std::filesystem::path(CNN_SOURCE_DIR) / "README.md");
  const size_t begin = readme.find(kBegin), end = readme.find(kEnd);
  REQUIRE(begin != std::string::npos);
  REQUIRE(end != std::string::npos);
  const std::string copy = readme.substr(begin + kBegin.size(), end - begin - kBegin.size());
  INFO("paste the output of `cnn-train validate --keys` between the markers of README.md");
  CHECK(copy == r.out);
}

TEST_CASE("cnn-train validate refuses hostile sizes at their key with exit 2", "[cpu]") {
  struct Case {
    std::string yaml, phrase;
  };
  const Case cases[] = {
      {kHead + "  - {name: c, type: conv2d, filters: 4, kernel: 4611686018427387905, padding: same, dilation: 3}\n"
               "  - {name: f, type: flatten}\n",
       "m.yaml:4:49: 'layers[0].kernel': expected an integer in [1, 1048576]"},
      {kHead + "  - {name: f, type: flatten}\n  - {name: fc, type: dense, units: 4611686018427387904}\n",
       "m.yaml:5:36: 'layers[1].units': expected an integer in [1, 1048576]"},
      {"name: t\ninput: {height: 4294967296, width: 4294967296}\nlayers:\n  - {name: f, type: flatten}\n",
       "m.yaml:2:17: 'input.height': expected an integer in [1, 1048576]"},
      {"name: caf\xe9\ninput: {height: 8, width: 8}\nlayers:\n  - {name: f, type: flatten}\n",
       "m.yaml:1:10: the text is not valid UTF-8 (byte 0xe9)"},
  };
  for (const Case& c : cases) {
    ProgramResult r = validate(c.yaml);
    INFO(r.describe());
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(c.phrase) != std::string::npos);
  }
}

TEST_CASE("cnn-train validate without a model file or --keys is a usage error", "[cpu]") {
  ProgramResult r = run_program(program_path("cnn-train"), {"validate"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("give MODEL.yaml file(s) to validate, or --keys") != std::string::npos);
}
