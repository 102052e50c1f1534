// Conv2d in the cross-backend op harness (test_backend_ops.cpp says how it works): every row of
// each direction (every named algorithm and every backend's default) against the double reference
// on shapes covering every stride, padding, dilation, groups and bias choice; our direct and
// implicit GEMM kernels also on shapes large enough for their tiles and split reductions.
// Every input is exact in bf16 (weights too: the bf16 rows round the FP32 masters) and x, y, dy, dx
// are marked as activations, so the bf16 rows run the same cases (the cpu emulation here, the
// cuda:igemm_nhwc, cuda:direct_nhwc and cuda rows in the [gpu] tests): the depthwise and C == 1
// shapes take the direct kernels, C and K multiples of 8 the GEMM's 16-byte path, the others its
// scalar one; grouped shapes with 1 < C/groups have no cuda bf16 row and are skipped there.
#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/cuda_context.h"
#include "ops/conv2d.h"
#include "ops/conv2d_algo.h"
#include "support/conv_sweep.h"
#include "support/op_harness.h"

namespace cnn {

// conv2d's rows also need their workspace within the context's limit (as the autotuner asks).
template <typename Args>
bool row_fits(const ConvAlgo& a, const Args& args) {
  try {
    return a.workspace_bytes(*args.ctx, args.sh) <= args.ctx->workspace_limit_bytes;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace cnn

using namespace cnn;
using namespace cnn::test;

namespace {

// ---- conv2d: every named algorithm and every backend's default, per direction ----

// Every stride, padding, dilation, groups and bias choice for 1x1, 3x3 and 2x3 kernels on odd
// non-square inputs, N alternating 1 and 3; then shapes for the direct kernels (C == 1 first layers,
// depthwise with a channel multiplier, 5x5 windows) and the shapes the transforms and cuDNN take.
std::vector<Conv2dShape> conv_shapes() {
  std::vector<Conv2dShape> shapes = conv_sweep_shapes(4, 6, true);
  for (int stride : {1, 2})
    for (int pad : {0, 1}) {
      shapes.push_back(Conv2dShape::make(3, 1, 11, 13, 5, 3, 3, stride, stride, pad, pad));          // C == 1
      shapes.push_back(Conv2dShape::make(1, 1, 9, 7, 20, 2, 3, stride, 1, pad, 0, 1, 2, 1, false));  // K > chunk
      shapes.push_back(Conv2dShape::make(2, 3, 10, 9, 6, 3, 3, stride, stride, pad, pad, 1, 1, 3));  // multiplier 2
      shapes.push_back(Conv2dShape::make(2, 5, 12, 11, 5, 5, 5, stride, stride, pad + 1, pad, 1, 1, 5));  // 5x5
      shapes.push_back(Conv2dShape::make(1, 2, 9, 9, 2, 5, 3, stride, 1, pad, pad, 2, 1, 2));        // 15 taps
    }
  for (const Conv2dShape& sh : {
           Conv2dShape::make(2, 8, 12, 12, 16, 3, 3, 1, 1, 1, 1),                 // 3x3 same (winograd, fft)
           Conv2dShape::make(1, 5, 9, 11, 7, 3, 3, 1, 1, 0, 0, 1, 1, 1, false),  // N=1, odd, no bias
           Conv2dShape::make(3, 6, 10, 9, 4, 5, 5, 1, 1, 2, 2),                  // 5x5
           Conv2dShape::make(2, 16, 7, 7, 32, 1, 1),                             // pointwise
           Conv2dShape::make(2, 4, 13, 11, 6, 3, 3, 2, 2, 1, 1),                 // strided
           Conv2dShape::make(2, 4, 11, 11, 6, 3, 3, 1, 1, 2, 2, 2, 2),           // dilated
           Conv2dShape::make(2, 8, 9, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, 2),          // grouped
           Conv2dShape::make(2, 8, 9, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, 8),          // depthwise
           Conv2dShape::make(4, 1, 20, 20, 8, 5, 5, 1, 1, 0, 0),                 // C == 1 first layer
           Conv2dShape::make(8, 32, 16, 16, 64, 3, 3, 1, 1, 1, 1),               // split reductions
           // the direct nhwc filter gradient's rows kernel (3x3, stride_w 1) and its pixels fallback
           Conv2dShape::make(3, 24, 7, 13, 24, 3, 3, 1, 1, 1, 1, 1, 1, 24),          // 24 channels, odd width
           Conv2dShape::make(5, 8, 1, 1, 8, 3, 3, 1, 1, 1, 1, 1, 1, 8, false),       // a 1x1 input
           Conv2dShape::make(2, 8, 11, 9, 8, 3, 3, 2, 1, 1, 1, 1, 1, 8),             // stride_h 2: rows
           Conv2dShape::make(2, 8, 11, 9, 8, 3, 3, 2, 2, 1, 1, 1, 1, 8),             // stride 2: pixels
       })
    shapes.push_back(sh);
  return shapes;
}

// Large enough for 128x128 and 64x128 tiles (ragged edges), split filter-gradient and forward
// reductions, the vector and scalar paths and the direct kernels' split sums: for our direct and
// implicit GEMM kernels (and the cuda default), as before the harness.
std::vector<Conv2dShape> conv_large_shapes() {
  return {
      Conv2dShape::make(8, 64, 24, 24, 128, 3, 3, 1, 1, 1, 1),        Conv2dShape::make(8, 15, 47, 49, 160, 3, 3, 1, 1, 1, 1),
      Conv2dShape::make(8, 144, 48, 48, 24, 3, 3, 1, 1, 1, 1, 1, 1, 1, false),
      Conv2dShape::make(8, 64, 24, 24, 128, 3, 3, 2, 2, 1, 1),        Conv2dShape::make(4, 32, 21, 19, 96, 3, 2, 2, 3, 2, 1, 2, 3, 2),
      Conv2dShape::make(8, 64, 24, 24, 64, 3, 3, 1, 1, 1, 1, 1, 1, 64), Conv2dShape::make(8, 64, 24, 24, 64, 5, 5, 2, 2, 2, 2, 1, 1, 64),
      Conv2dShape::make(8, 1, 48, 48, 64, 3, 3, 1, 1, 1, 1),          Conv2dShape::make(8, 3, 48, 47, 20, 3, 3, 1, 1, 1, 1),
      Conv2dShape::make(8, 8, 46, 46, 8, 3, 3),                       Conv2dShape::make(8, 64, 12, 12, 40, 1, 1, 2, 2),
      Conv2dShape::make(4, 128, 3, 3, 7, 3, 3, 1, 1, 1, 1),           Conv2dShape::make(2, 256, 4, 4, 16, 3, 3, 1, 1, 1, 1, 1, 1, 2),
      Conv2dShape::make(8, 16, 16, 16, 16, 1, 1),                     Conv2dShape::make(8, 4, 32, 32, 4, 3, 3, 1, 1, 1, 1),
      Conv2dShape::make(64, 1, 48, 48, 2, 3, 3, 1, 1, 1, 1),
      Conv2dShape::make(48, 8, 23, 21, 8, 3, 3, 1, 1, 1, 1, 1, 1, 8, false),  // rows: segments, full slices
  };
}

// The rows the large shapes are for, in two families (each a test case of its own per direction):
// our implicit GEMM kernels with the cuda default, and our direct kernels.
bool large_gemm_row(std::string_view r) { return r == "cuda" || r == "cuda:implicit_gemm" || r == "cuda:igemm_nhwc"; }
bool large_direct_row(std::string_view r) { return r == "cuda:direct" || r == "cuda:direct_nhwc"; }

struct ConvCases {
  std::vector<Case<Conv2dForward>> forward;
  std::vector<Case<Conv2dBackwardData>> data;
  std::vector<Case<Conv2dBackwardFilter>> filter;
};

// keep: which of the shapes to take (null: all).
ConvCases cases_conv2d(bool large, const std::function<bool(const Conv2dShape&)>& keep = {}) {
  ConvCases out;
  std::vector<Conv2dShape> shapes = large ? conv_large_shapes() : conv_shapes();
  if (keep) shapes.erase(std::remove_if(shapes.begin(), shapes.end(), [&](const Conv2dShape& sh) { return !keep(sh); }),
                         shapes.end());
  uint64_t seed = 17;
  for (const Conv2dShape& sh : shapes) {
    const std::vector<float> x = bf16_exact(random_floats(size_t(sh.N * sh.C * sh.H * sh.W), ++seed)),
                             w = bf16_exact(random_floats(size_t(sh.weight_numel()), ++seed)),
                             b = bf16_exact(random_floats(size_t(sh.K), ++seed)),
                             dy = bf16_exact(random_floats(size_t(sh.N * sh.K * sh.P * sh.Q), ++seed));
    const std::vector<int64_t> in_dims{sh.N, sh.C, sh.H, sh.W}, out_dims{sh.N, sh.K, sh.P, sh.Q};
    const std::vector<double> xd = to_double(x), wd = to_double(w), bd = to_double(b), dyd = to_double(dy);
    std::vector<double> y(dy.size()), dx(x.size()), dw(w.size()), db(b.size());
    conv2d_forward_reference<double>(oracle_ctx(), sh, xd.data(), wd.data(), sh.has_bias ? bd.data() : nullptr,
                                     y.data());
    conv2d_backward_reference<double>(oracle_ctx(), sh, xd.data(), wd.data(), dyd.data(), dx.data(), dw.data(),
                                      db.data());
    std::function<bool(std::string_view)> rows;
    if (large) rows = [](std::string_view r) { return large_gemm_row(r) || large_direct_row(r); };
    Case<Conv2dForward> f{sh.to_string()};
    f.in("x", x).act(in_dims).in("w", w).in("b", b).out("y", to_float(y)).act(out_dims);
    f.rows = rows;
    f.bind = [sh](Bound& t) {
      return Conv2dForward{t.ctx(), sh, t.in("x"), t.in("w"), sh.has_bias ? t.in("b") : nullptr, t.out("y")};
    };
    out.forward.push_back(f);
    Case<Conv2dBackwardData> g{sh.to_string()};
    g.in("w", w).in("dy", dy).act(out_dims).out("dx", to_float(dx)).act(in_dims);
    g.rows = rows;
    g.bind = [sh](Bound& t) { return Conv2dBackwardData{t.ctx(), sh, t.in("w"), t.in("dy"), t.out("dx")}; };
    out.data.push_back(g);
    Case<Conv2dBackwardFilter> h{sh.to_string()};
    h.in("x", x).act(in_dims).in("dy", dy).act(out_dims).out("dw", to_float(dw));
    if (sh.has_bias) h.optional_out("db", to_float(db));
    h.rows = rows;
    h.bind = [sh](Bound& t) {
      return Conv2dBackwardFilter{t.ctx(), sh, t.in("x"), t.in("dy"), t.out("dw"), sh.has_bias ? t.out("db") : nullptr};
    };
    out.filter.push_back(h);
  }
  return out;
}

// The GPU tests' cases, made once per process (the large shapes' double references take seconds).
const ConvCases& gpu_cases(bool large) {
  static const ConvCases small = cases_conv2d(false);
  if (!large) return small;
  static const ConvCases big = cases_conv2d(true);
  return big;
}

template <typename Args>
std::map<std::string, int> check_on_gpu(const std::vector<Case<Args>>& cases) {
  CudaContext cuda;
  return check_rows(cases, true, cuda.ctx(), [&] { cuda.synchronize(); });
}

// Every gpu row of one direction on the small shapes, and at least 4 cuDNN algorithms among them.
template <typename Args>
void check_small_on_gpu(const std::vector<Case<Args>>& cases) {
  int cudnn = 0;
  for (const auto& [what, runs] : check_on_gpu(cases)) cudnn += what.rfind("cudnn:", 0) == 0 && runs > 0;
  CHECK(cudnn >= 4);
}

// One family's rows of one direction on the large shapes.
template <typename Args>
void check_large_on_gpu(std::vector<Case<Args>> cases, bool (*family)(std::string_view)) {
  for (Case<Args>& c : cases) c.rows = family;
  check_on_gpu(cases);
}

}  // namespace

TEST_CASE("backend ops: every cpu row of conv2d matches the reference in every direction", "[cpu]") {
  const ConvCases c = cases_conv2d(false);
  check_family(false, c.forward, c.data, c.filter);
}

// The large one-input-channel shapes (depthwise, C == 1) take the direct row's threaded path;
// both rows that run it, against the reference.
TEST_CASE("backend ops: the cpu direct and default rows of conv2d match the reference on large depthwise shapes",
          "[cpu]") {
  ConvCases c = cases_conv2d(true, conv2d_cpu_direct_can_implement);
  REQUIRE(c.forward.size() >= 4);
  const auto cpu_rows = [](std::string_view r) { return r == "cpu:direct" || r == "cpu"; };
  for (auto& f : c.forward) f.rows = cpu_rows;
  for (auto& g : c.data) g.rows = cpu_rows;
  for (auto& h : c.filter) h.rows = cpu_rows;
  check_family(false, c.forward, c.data, c.filter);
}

// cuDNN decides per shape and version which of its algorithms it accepts (9.14 with FMA math never
// took cudnn:direct forward, cudnn:winograd forward/backward_data or cudnn:fft_tiling
// backward_filter on these): the harness warns about those, and at least 4 cuDNN algorithms per
// direction must have run, so the cuDNN part cannot pass vacuously. One test case a direction, and
// one per direction and row family on the large shapes: under compute-sanitizer's racecheck the
// whole set outlasted any time box as one case (tools/gpu_sanitize.sh runs each case on its own).
TEST_CASE("backend ops: every gpu row of conv2d matches the reference forward", "[gpu]") {
  CNN_REQUIRE_GPU();
  check_small_on_gpu(gpu_cases(false).forward);
}

TEST_CASE("backend ops: every gpu row of conv2d matches the reference in the data gradient", "[gpu]") {
  CNN_REQUIRE_GPU();
  check_small_on_gpu(gpu_cases(false).data);
}

TEST_CASE("backend ops: every gpu row of conv2d matches the reference in the filter gradient", "[gpu]") {
  CNN_REQUIRE_GPU();
  check_small_on_gpu(gpu_cases(false).filter);
}

TEST_CASE("backend ops: the gpu implicit gemm and default rows of conv2d match the reference forward on large shapes",
          "[gpu]") {
  CNN_REQUIRE_GPU();
  check_large_on_gpu(gpu_cases(true).forward, large_gemm_row);
}

TEST_CASE("backend ops: the gpu implicit gemm and default rows of conv2d match the reference in the data gradient "
          "on large shapes",
          "[gpu]") {
  CNN_REQUIRE_GPU();
  check_large_on_gpu(gpu_cases(true).data, large_gemm_row);
}

TEST_CASE("backend ops: the gpu implicit gemm and default rows of conv2d match the reference in the filter gradient "
          "on large shapes",
          "[gpu]") {
  CNN_REQUIRE_GPU();
  check_large_on_gpu(gpu_cases(true).filter, large_gemm_row);
}

TEST_CASE("backend ops: the gpu direct rows of conv2d match the reference forward on large shapes", "[gpu]") {
  CNN_REQUIRE_GPU();
  check_large_on_gpu(gpu_cases(true).forward, large_direct_row);
}

TEST_CASE("backend ops: the gpu direct rows of conv2d match the reference in the data gradient on large shapes",
          "[gpu]") {
  CNN_REQUIRE_GPU();
  check_large_on_gpu(gpu_cases(true).data, large_direct_row);
}

TEST_CASE("backend ops: the gpu direct rows of conv2d match the reference in the filter gradient on large shapes",
          "[gpu]") {
  CNN_REQUIRE_GPU();
  check_large_on_gpu(gpu_cases(true).filter, large_direct_row);
}
