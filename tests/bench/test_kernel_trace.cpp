// The step breakdown's arithmetic (bench/kernel_trace.h, bench/benchmark.h): the union of kernel
// intervals, the categories kernel names fall into, and the per-step rows; and the CPU refusal.
#include <string>
#include <vector>

#include "bench/benchmark.h"
#include "bench/kernel_trace.h"
#include "config/model_spec.h"
#include "layers/registry.h"
#include "core/error.h"
#include "support/catch.h"

using namespace cnn;

TEST_CASE("busy time counts overlapping kernels once and gaps not at all", "[cpu]") {
  CHECK(busy_ns({}) == 0);
  // [0,10) and [5,20) overlap -> 20; [30,40) -> 10; [35,38) inside it; [50,50) is empty.
  std::vector<KernelRecord> r = {{"a", 30, 40}, {"b", 0, 10}, {"c", 5, 20}, {"d", 35, 38}, {"e", 50, 50}};
  CHECK(busy_ns(r) == 30);
  CHECK(busy_ns({{"x", 100, 200}, {"y", 200, 300}}) == 200);  // touching, not overlapping
}

TEST_CASE("kernel names fall into the breakdown's categories", "[cpu]") {
  CHECK(kernel_category("void cnn::conv2d_igemm_nhwc_wgmma_kernel<128, 256>(cnn::Args)") == "conv");
  CHECK(kernel_category("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc") == "conv");
  CHECK(kernel_category("sm90_xmma_wgrad_implicit_gemm_indexed") == "conv");
  CHECK(kernel_category("conv2d_pack_weights_bf16_kernel") == "cast/pack");
  CHECK(kernel_category("void cnn::(anonymous namespace)::convert_kernel<float, cnn::bf16>(...)") == "cast/pack");
  CHECK(kernel_category("batchnorm_normalize_nhwc_bf16_kernel") == "batchnorm");
  CHECK(kernel_category("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64") == "gemm");
  CHECK(kernel_category("nvjet_tst_128x128_64x4_2x1_v_bz_TNN") == "gemm");
  CHECK(kernel_category("pool2d_forward_window_nhwc_bf16_kernel") == "pool");
  CHECK(kernel_category("activation_forward_pointwise_kernel") == "activation");
  CHECK(kernel_category("concat_copy_rows_kernel") == "add/concat/dropout");
  CHECK(kernel_category("softmax_cross_entropy_forward_warp_kernel") == "loss");
  CHECK(kernel_category("optimizer_update_fused_kernel") == "optimizer");
  CHECK(kernel_category("grad_norm_forward_chunk_kernel") == "optimizer");
  CHECK(kernel_category("some_unknown_kernel") == "other");
}

TEST_CASE("a breakdown divides by the steps and sorts by time", "[cpu]") {
  // Two steps over 1 ms of window: 0.5 ms per step. Kernels [0, 0.1), [0.09, 0.14), [0.5, 0.55) ms:
  // their union is 0.19 ms over both steps, 0.095 ms per step.
  std::vector<KernelRecord> r = {{"conv_a", 0, 100000}, {"batchnorm_b", 90000, 140000}, {"conv_a", 500000, 550000}};
  StepBreakdown b = make_breakdown(r, 1000000, 2, "test", 0.4);
  CHECK(b.steps == 2);
  CHECK(b.traced_step_ms == Approx(0.5));
  CHECK(b.busy_ms == Approx(0.095));
  CHECK(b.kernels_per_step == Approx(1.5));
  REQUIRE(b.categories.size() == 2);
  CHECK(b.categories[0].name == "conv");
  CHECK(b.categories[0].ms_per_step == Approx(0.075));
  CHECK(b.categories[0].kernels_per_step == Approx(1.0));
  CHECK(b.categories[1].name == "batchnorm");
  CHECK(b.idle_ms == Approx(0.5 - b.busy_ms));
  REQUIRE(b.top_kernels.size() == 2);
  CHECK(b.top_kernels[0].name == "conv_a");
  CHECK(b.untraced_idle_ms == Approx(0.4 - 0.095));
  CHECK(make_breakdown(r, 1000000, 2, "test", 0.05).untraced_idle_ms == 0);  // never negative
  const std::string table = b.to_table();
  CHECK(table.find("idle") != std::string::npos);
  CHECK(b.to_json()["categories"].size() == 2);
  CHECK_THROWS_AS(make_breakdown(r, 1000000, 0, "test"), Error);
}

TEST_CASE("a step breakdown on the CPU is refused with the reason", "[cpu]") {
  const char* model =
      "name: tiny\ninput: {channels: 1, height: 6, width: 6}\nclasses: [a, b]\n"
      "layers:\n  - {name: flat, type: flatten}\n  - {name: fc, type: dense, units: 2}\n"
      "train: {batch_size: 4, optimizer: {type: sgd, lr: 0.1}}\n";
  ModelBenchOptions opt;
  opt.device = "cpu";
  opt.breakdown = true;
  opt.steps = 1;
  opt.repeats = 1;
  opt.warmup = 0;
  try {
    bench_model(parse_model_text(model, "tiny.yaml"), opt);
    FAIL("bench_model accepted --breakdown on the CPU");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("--breakdown") != std::string::npos);
  }
}
