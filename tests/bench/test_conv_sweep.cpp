// Sweep files for `cnn-bench conv`: expansion counts and names, the bundled files, strict errors
// located at the key, and model conv layers deduplicated.
#include <string>

#include "config/value.h"
#include "core/error.h"
#include "support/catch.h"
#include "bench/conv_bench.h"
#include "bench/conv_sweep.h"

using namespace cnn;

static std::vector<ConvPoint> parse(const std::string& text) {
  return parse_conv_sweep(parse_yaml(text, "s.yaml"));
}

static std::string parse_error(const std::string& text) {
  try {
    parse(text);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "<no error>";
}

static const std::string kBase =
    "version: 1\n"
    "defaults: {directions: [forward, backward_filter], warmup: 2, repeats: 4}\n"
    "shapes:\n"
    "  - {name: A, N: 2, C: 3, H: 10, W: 10, K: 4, R: 3, S: 3, stride: 1, padding: 1}\n";

TEST_CASE("conv sweep expands base shapes and one-parameter sweeps with tied keys", "[cpu]") {
  auto pts = parse(kBase +
                   "sweeps:\n"
                   "  - {name: A_in, base: A, sweep: {param: [H, W], values: [8, 16]}}\n"
                   "  - {name: A_k, base: A, sweep: {param: K, values: [1, 2, 3]}}\n");
  REQUIRE(pts.size() == 6);
  CHECK(pts[0].name == "A");
  CHECK(pts[0].group == "base shapes");
  CHECK(pts[0].directions.size() == 2);
  CHECK(pts[0].warmup == 2);
  CHECK(pts[0].repeats == 4);
  CHECK(pts[1].name == "A_in/H=W=8");
  CHECK(pts[1].group == "A_in");
  CHECK(pts[2].shape.H == 16);
  CHECK(pts[2].shape.W == 16);
  CHECK(pts[2].shape.P == 16);
  CHECK(pts[5].name == "A_k/K=3");
  CHECK(pts[5].shape.K == 3);
  CHECK(pts[5].shape.C == 3);
}

TEST_CASE("the bundled sweep files parse with the expected point counts", "[cpu]") {
  const std::string dir = std::string(CNN_SOURCE_DIR) + "/bench/sweeps/";
  CHECK(load_conv_sweep(dir + "tiny_cpu.yaml").size() == 2 + 2 + 3);
  // 5 base shapes and 30 sweeps of 4 to 8 values (counted from the file).
  CHECK(load_conv_sweep(dir + "convnet_layers.yaml").size() == 5 + 174);
}

TEST_CASE("conv sweep errors name the file, line and key with a suggestion", "[cpu]") {
  std::string e = parse_error(kBase + "sweeps:\n  - {name: B, base: A, sweep: {param: Kk, values: [1]}}\n");
  CHECK(e.find("s.yaml:6") != std::string::npos);
  CHECK(e.find("expected a shape key or a list of them, found 'Kk', did you mean 'K'?") != std::string::npos);
  e = parse_error(kBase + "sweeps:\n  - {name: B, base: AA, sweep: {param: K, values: [1]}}\n");
  CHECK(e.find("unknown base shape 'AA'") != std::string::npos);
  e = parse_error("version: 1\nshapes:\n  - {name: A, N: 2, C: 3, H: 10, W: 10, K: 4, R: 3, S: 3, stride: 1, "
                  "padding: 1, dilation: 2}\n");
  CHECK(e.find("s.yaml:3") != std::string::npos);
  CHECK(e.find("dilation") != std::string::npos);
  e = parse_error(kBase + "sweeps:\n  - {name: B, base: A, sweep: {param: [R, S], values: [3, 13]}}\n");
  CHECK(e.find("the output would be empty") != std::string::npos);
  CHECK(e.find("s.yaml:6") != std::string::npos);
  e = parse_error("version: 1\ndefaults: {directions: [forwrd]}\nshapes: []\n");
  CHECK(e.find("did you mean 'forward'") != std::string::npos);
}

TEST_CASE("model conv layers become points at the model batch, deduplicated by shape", "[cpu]") {
  const std::string m = std::string(CNN_SOURCE_DIR) + "/models/tiny.yaml";
  auto once = model_conv_points({m});
  REQUIRE_FALSE(once.empty());
  CHECK(once[0].group.rfind("model ", 0) == 0);
  CHECK(once[0].shape.N > 0);
  CHECK(model_conv_points({m, m}).size() == once.size());
}

TEST_CASE("implementation patterns match like shell globs", "[cpu]") {
  CHECK(glob_match("*", "cuda:fft"));
  CHECK(glob_match("cuda:*", "cuda:fft"));
  CHECK_FALSE(glob_match("cuda:*", "cudnn:fft"));
  CHECK(glob_match("*winograd*", "cudnn:winograd_nonfused"));
  CHECK(glob_match("cpu:im2col_gem?", "cpu:im2col_gemm"));
}

TEST_CASE("the sweep and shape filters (--sweep, --shape) select the named sweeps and base shapes and keep model points", "[cpu]") {
  std::vector<ConvPoint> pts = parse(kBase +
                                     "  - {name: B, N: 1, C: 2, H: 6, W: 6, K: 2, R: 1, S: 1, stride: 1, padding: 0}\n"
                                     "sweeps:\n"
                                     "  - {name: A_in, base: A, sweep: {param: [H, W], values: [8, 16]}}\n"
                                     "  - {name: A_k, base: A, sweep: {param: K, values: [1, 2, 3]}}\n"
                                     "  - {name: B_k, base: B, sweep: {param: K, values: [4]}}\n");
  ConvPoint model = pts[0];
  model.group = "model tiny", model.name = "tiny/conv1";
  pts.push_back(model);
  auto names = [](const std::vector<ConvPoint>& v) {
    std::vector<std::string> n;
    for (const ConvPoint& p : v) n.push_back(p.name);
    return n;
  };
  CHECK(select_conv_points(pts, {}, {}).size() == pts.size());
  CHECK(names(select_conv_points(pts, {"A_k"}, {})) ==
        std::vector<std::string>{"A_k/K=1", "A_k/K=2", "A_k/K=3", "tiny/conv1"});
  CHECK(names(select_conv_points(pts, {"B_k", "A_in"}, {"B"})) ==
        std::vector<std::string>{"B", "A_in/H=W=8", "A_in/H=W=16", "B_k/K=4", "tiny/conv1"});
  CHECK(names(select_conv_points(pts, {"A_*"}, {})).size() == 2 + 3 + 1);
  CHECK(names(select_conv_points(pts, {}, {"A"})) == std::vector<std::string>{"A", "tiny/conv1"});
  try {
    select_conv_points(pts, {"A_kk"}, {});
    FAIL("no error for a sweep name that matches nothing");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()).find("'A_kk' matches no sweep") != std::string::npos);
    CHECK(std::string(e.what()).find("did you mean 'A_k'") != std::string::npos);
  }
  CHECK_THROWS_AS(select_conv_points(pts, {}, {"A_k"}), ConfigError);  // a sweep is not a base shape
}

TEST_CASE("the (point, direction) pairs of a cnn-bench conv CSV are read back for --append", "[cpu]") {
  const std::string h = ConvBenchResult::csv_header();
  const auto pairs = conv_csv_pairs(h + "base shapes,L1,cuda:fft,forward,1,2,0.1,0,1,ok,fp32,1,1,1,1,1,1,1,1,0,,3,0.1,\n"
                                        "L1_batch,L1_batch/N=16,cudnn:fft,backward_data,,,,0,0,cannot implement,fp32,"
                                        "1,1,1,1,1,1,1,1,0,,0,0,\n",
                                    "x.csv");
  CHECK(pairs == std::set<std::pair<std::string, std::string>>{{"L1", "forward"}, {"L1_batch/N=16", "backward_data"}});
  CHECK(conv_csv_pairs(h, "x.csv").empty());
  CHECK_THROWS_AS(conv_csv_pairs("layer,impl,direction,ms\n", "x.csv"), ConfigError);
}
