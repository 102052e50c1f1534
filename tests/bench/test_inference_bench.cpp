// `cnn-bench model --inference` (bench/benchmark.h): the result's fields and JSON, forward passes in
// evaluation mode that leave weights and batchnorm statistics as they were (on the CPU, and on a
// GPU in fp32 and bf16), and the options it refuses. Nothing here asserts a speed.
#include <fmt/format.h>

#include <algorithm>

#include "bench/benchmark.h"
#include "config/model_spec.h"
#include "core/error.h"
#include "model/model_stack.h"
#include "support/catch.h"
#include "support/test_util.h"

using namespace cnn;
using namespace cnn::test;
using Catch::Matchers::Contains;

namespace {

// Batchnorm (running statistics move in a training-mode forward) and dropout (random in one).
const char* kModel =
    "name: infer\ninput: {channels: 3, height: 10, width: 10}\nclasses: [a, b, c, d]\n"
    "layers:\n"
    "  - {name: conv1, type: conv2d, filters: 6, kernel: 3, padding: 1}\n"
    "  - {name: bn1, type: batchnorm}\n"
    "  - {name: relu1, type: relu}\n"
    "  - {name: pool1, type: maxpool, kernel: 2}\n"
    "  - {name: flat, type: flatten}\n"
    "  - {name: drop, type: dropout, p: 0.5}\n"
    "  - {name: fc, type: dense, units: 4}\n"
    "data: {format: synthetic}\n"
    "train: {batch_size: 5, optimizer: {type: sgd, lr: 0.1, momentum: 0.9}}\n";

ModelBenchOptions short_run(const std::string& device) {
  ModelBenchOptions opt;
  opt.device = device;
  opt.inference = true;
  opt.warmup = 1;
  opt.steps = 2;
  opt.repeats = 3;
  return opt;
}

void check_timing_json(const nlohmann::json& t, size_t repeats) {
  INFO(t.dump());
  REQUIRE(t.contains("step_ms"));
  CHECK(t["step_ms_min"].get<double>() > 0);
  CHECK(t["step_ms_min"].get<double>() <= t["step_ms"].get<double>());
  CHECK(t["step_ms"].get<double>() <= t["step_ms_max"].get<double>());
  CHECK(t["img_per_s"].get<double>() > 0);
  CHECK(t["repeat_img_per_s"].size() == repeats);
}

// Running the timed passes leaves every parameter and buffer as it was, and the last pass's logits
// are those of an evaluation-mode forward (dropout off, batchnorm on running statistics): the same
// bits on the CPU; on a GPU within a rounding of another summation order (a training-mode pass
// drops half the features, far outside either).
void check_weights_unchanged(const std::string& device, const std::string& precision, Tolerance tol) {
  const ModelSpec spec = parse_model_text(kModel, "infer.yaml", {"train.precision=" + precision});
  ModelStack stack(spec);
  Executor& ex = stack.build_inference(spec, device, 4);
  ex.init_params(3);
  const std::vector<float> params = ex.params().to_vector(), buffers = ex.buffers().to_vector();
  const std::vector<float> batch = random_floats(size_t(ex.input().numel()), 11, -2.0f, 2.0f);
  const InferenceTiming t = time_inference(ex, 4, batch, short_run(device));
  CHECK(t.on_device.repeat_images_per_s.size() == 3);
  CHECK(t.end_to_end.repeat_images_per_s.size() == 3);
  const std::vector<float> logits = ex.output().to_vector();
  CHECK(ex.params().to_vector() == params);
  CHECK(ex.buffers().to_vector() == buffers);
  ex.input().copy_from(Tensor::from_vector(ex.input().shape(), batch));
  ex.forward(4, false, 0, 0);
  const std::string diff = compare(logits, ex.output().to_vector(), tol);
  CHECK(diff == "");
}

}  // namespace

TEST_CASE("inference bench reports its mode, input, spread and end-to-end figure in the json", "[cpu]") {
  const ModelSpec spec = parse_model_text(kModel, "infer.yaml");
  const ModelBenchResult r = bench_model(spec, short_run("cpu"));
  const nlohmann::json j = r.to_json();
  INFO(j.dump(1));
  CHECK(j["mode"] == "inference");
  CHECK(j["batch"] == 5);  // train.batch_size
  CHECK(j["precision"] == "fp32");
  CHECK(j["threads"].get<int>() >= 1);
  CHECK_THAT(j["device"].get<std::string>(), Contains("cpu"));
  CHECK(j["cuda_graph"] == "off (CPU run)");
  CHECK_THAT(j["input"].get<std::string>(), Contains("synthetic batch already in the executor's input"));
  CHECK(j["inference_gflop_per_image"].get<double>() == Approx(Graph::build(spec)->forward_flops() / 1e9));
  CHECK_FALSE(j.contains("training_gflop_per_image"));
  check_timing_json(j, 3);
  REQUIRE(j.contains("end_to_end"));
  check_timing_json(j["end_to_end"], 3);
  CHECK_THAT(j["end_to_end"]["what"].get<std::string>(), Contains("copied from host memory"));
  const std::string text = r.to_table();
  CHECK_THAT(text, Contains("batch 5, precision fp32, inference:"));
  CHECK_THAT(text, Contains("end to end ("));
}

TEST_CASE("inference bench takes the batch and precision it is given", "[cpu]") {
  ModelBenchOptions opt = short_run("cpu");
  opt.batch = 2;
  const ModelBenchResult r = bench_model(parse_model_text(kModel, "infer.yaml", {"train.precision=bf16"}), opt);
  CHECK(r.batch == 2);
  CHECK(r.precision == "bf16");
}

TEST_CASE("the training bench json says its mode and keeps its keys", "[cpu]") {
  ModelBenchOptions opt = short_run("cpu");
  opt.inference = false;
  const nlohmann::json j = bench_model(parse_model_text(kModel, "infer.yaml"), opt).to_json();
  CHECK(j["mode"] == "training");
  CHECK(j["training_gflop_per_image"].get<double>() > 0);
  CHECK_FALSE(j.contains("end_to_end"));
  check_timing_json(j, 3);
  // The autotuner's picks, a line per layer: conv1's three directions, the others' backends.
  REQUIRE(j["decisions"].is_array());
  REQUIRE(j["decisions"].size() == 7);
  const std::string conv = j["decisions"][0].get<std::string>();
  CHECK(conv.rfind("conv conv1 cpu:", 0) == 0);
  CHECK(std::count(conv.begin(), conv.end(), ' ') == 4);  // conv, the name, three algorithms
  CHECK(j["decisions"][1] == "backend bn1 cpu");
  CHECK(j["decisions"][6] == "backend fc cpu");
}

TEST_CASE("inference passes leave weights and batchnorm statistics unchanged and run in evaluation mode", "[cpu]") {
  check_weights_unchanged("cpu", "fp32", kExact);
}

TEST_CASE("inference on a gpu leaves weights unchanged and says it runs uncaptured", "[gpu]") {
  CNN_REQUIRE_GPU();
  for (const char* precision : {"fp32", "bf16"}) {
    INFO(precision);
    check_weights_unchanged("cuda", precision, std::string(precision) == "bf16" ? kBf16OutputVsCpu : kGpuVsCpu);
    ModelBenchOptions opt = short_run("cuda");
    const ModelBenchResult r =
        bench_model(parse_model_text(kModel, "infer.yaml", {fmt::format("train.precision={}", precision)}), opt);
    INFO(r.to_table());
    CHECK(r.mode == "inference");
    CHECK(r.precision == precision);
    CHECK(r.threads == 0);
    CHECK_THAT(r.cuda_graph, Contains("uncaptured"));
    CHECK_THAT(r.input, Contains("on the GPU"));
    CHECK(r.timing.images_per_s > 0);
    CHECK(r.end_to_end.images_per_s > 0);
    WARN(r.to_table());
  }
}

TEST_CASE("inference bench refuses breakdown, layers and dump as usage errors", "[cpu]") {
  const ModelSpec spec = parse_model_text(kModel, "infer.yaml");
  ModelBenchOptions opt = short_run("cpu");
  opt.breakdown = true;
  CHECK_THROWS_WITH(bench_model(spec, opt), Contains("--breakdown does not go with --inference"));
  CHECK_THROWS_AS(bench_model(spec, opt), ConfigError);
  opt.breakdown = false;
  opt.layers = true;
  CHECK_THROWS_AS(bench_model(spec, opt), ConfigError);
  opt.layers = false;
  opt.dump_path = "never.safetensors";
  CHECK_THROWS_WITH(bench_model(spec, opt), Contains("--dump does not go with --inference"));
}
