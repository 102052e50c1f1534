// The Winograd, im2col+GEMM and FFT CUDA strategies (conv2d_strategies.h) against the CPU reference
// in double, per direction, over generated shapes (odd sizes, N = 1, paddings 0-3, channel counts
// that are not multiples of 4 or 32; for im2col every stride, dilation and groups mix), plus
// shapes big enough to split the batch into chunks, bitwise repeats, and null bias gradients.
// Trap: each shape list is built to lie inside the strategy's rules and the test REQUIREs
// can_implement, so a strategy cannot pass by declining; outputs are NaN-poisoned before each run.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "core/error.h"
#include "ops/conv2d.h"
#include "ops/conv2d_algo.h"
#include "ops/conv2d_strategies.h"
#include "support/catch.h"
#include "support/conv_operands.h"
#include "support/conv_sweep.h"
#include "support/device_floats.h"
#include "support/test_util.h"
#include "support/tolerance.h"

using namespace cnn;
using cnn::test::compare;
using cnn::test::DeviceFloats;
using cnn::test::kGpuVsCpu;

namespace {

const ConvDir kDirs[] = {ConvDir::forward, ConvDir::backward_data, ConvDir::backward_filter};

struct Strategy {
  const char* name;
  std::function<bool(const Conv2dShape&, ConvDir)> can_implement;
  std::function<size_t(const Conv2dShape&, ConvDir)> workspace_bytes;
  std::function<void(const ExecContext&, const Conv2dShape&, ConvDir, const ConvOperandsF32&)> run;
  // FFT rounding error is relative to the whole transformed plane, not to each output (Mathieu et
  // al. 2014), so near-zero outputs get an absolute slack scaled by the largest one.
  bool plane_relative_error = false;
};
const Strategy kWinograd{"winograd", conv2d_cuda_winograd_can_implement, conv2d_cuda_winograd_workspace_bytes,
                         conv2d_cuda_winograd_run};
const Strategy kIm2col{"im2col_gemm", conv2d_cuda_im2col_gemm_can_implement, conv2d_cuda_im2col_gemm_workspace_bytes,
                       conv2d_cuda_im2col_gemm_run};
const Strategy kFft{"fft", conv2d_cuda_fft_can_implement, conv2d_cuda_fft_workspace_bytes, conv2d_cuda_fft_run, true};
// Chunked shapes sum ~10^6 products per filter gradient: the float CPU reference itself drifts by
// more than kGpuVsCpu's atol where such a sum cancels.
constexpr test::Tolerance kLongSums{1e-2, 1e-3};

// Operands and results of one conv: the double reference for small shapes, the fast CPU path for
// the large chunked ones (a double reference would take minutes there).
struct Reference : test::ConvHostOperands {
  Reference(const Conv2dShape& shape, uint64_t seed, bool fast_cpu = false)
      : ConvHostOperands(shape, seed) {
    const ExecContext cpu = ExecContext::cpu();
    const float* bias = sh.has_bias ? b.data() : nullptr;
    if (fast_cpu) {
      conv2d_forward_cpu(cpu, sh, x.data(), w.data(), bias, y.data());
      conv2d_backward_cpu(cpu, sh, x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data());
      return;
    }
    auto d = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
    const std::vector<double> xd = d(x), wd = d(w), bd = d(b), dyd = d(dy);
    std::vector<double> yd(y.size()), dxd(dx.size()), dwd(dw.size()), dbd(db.size());
    conv2d_forward_reference<double>(cpu, sh, xd.data(), wd.data(), sh.has_bias ? bd.data() : nullptr, yd.data());
    conv2d_backward_reference<double>(cpu, sh, xd.data(), wd.data(), dyd.data(), dxd.data(), dwd.data(), dbd.data());
    auto f = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
    y = f(yd), dx = f(dxd), dw = f(dwd), db = f(dbd);
  }
};

struct DeviceConv {
  DeviceFloats x, w, b, dy, y, dx, dw, db;
  // offset 1 puts every operand off 16-byte alignment.
  explicit DeviceConv(const Reference& r, int64_t offset = 0)
      : x(r.x, offset),
        w(r.w, offset),
        b(r.b, offset),
        dy(r.dy, offset),
        y(r.y, offset),
        dx(r.dx, offset),
        dw(r.dw, offset),
        db(r.db, offset) {}
  void poison() {
    for (DeviceFloats* d : {&y, &dx, &dw, &db}) d->poison();
  }
};

bool all_nan(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(), [](float f) { return std::isnan(f); });
}

// Runs one direction with poisoned outputs and checks its outputs against the reference (and that
// db stays untouched when not asked for).
test::Tolerance tolerance_for(const Strategy& s, const std::vector<float>& ref, test::Tolerance base) {
  if (!s.plane_relative_error) return base;
  float top = 0.0f;
  for (float v : ref) top = std::max(top, std::fabs(v));
  return {base.atol + 1e-5 * top, base.rtol};
}

void run_and_check(CudaContext& cuda, const Strategy& s, ConvDir dir, const Reference& r, DeviceConv& d, bool want_db,
                   test::Tolerance tol = kGpuVsCpu) {
  REQUIRE(s.can_implement(r.sh, dir));
  d.poison();
  ConvOperandsF32 op;
  switch (dir) {
    case ConvDir::forward:
      op.x = d.x.data(), op.w = d.w.data(), op.b = r.sh.has_bias ? d.b.data() : nullptr, op.y = d.y.data();
      break;
    case ConvDir::backward_data:
      op.w = d.w.data(), op.dy = d.dy.data(), op.dx = d.dx.data();
      break;
    case ConvDir::backward_filter:
      op.x = d.x.data(), op.dy = d.dy.data(), op.dw = d.dw.data(), op.db = want_db ? d.db.data() : nullptr;
      break;
  }
  s.run(cuda.ctx(), r.sh, dir, op);
  cuda.synchronize();
  // Inputs are read only (the FFT transforms an unpadded x straight from the caller's buffer).
  CHECK(d.x.get() == r.x);
  CHECK(d.w.get() == r.w);
  CHECK(d.dy.get() == r.dy);
  if (dir == ConvDir::forward) CHECK(compare(d.y.get(), r.y, tolerance_for(s, r.y, tol)) == "");
  if (dir == ConvDir::backward_data) CHECK(compare(d.dx.get(), r.dx, tolerance_for(s, r.dx, tol)) == "");
  if (dir == ConvDir::backward_filter) {
    CHECK(compare(d.dw.get(), r.dw, tolerance_for(s, r.dw, tol)) == "");
    if (want_db)
      CHECK(compare(d.db.get(), r.db, tol) == "");
    else
      CHECK(all_nan(d.db.get()));
  }
}

void check_all(const Strategy& s, const std::vector<Conv2dShape>& shapes, const std::vector<ConvDir>& dirs) {
  CudaContext cuda;
  int i = 0;
  for (const Conv2dShape& sh : shapes) {
    const Reference r(sh, 31 + i);
    DeviceConv d(r);
    for (ConvDir dir : dirs) {
      INFO(fmt::format("{} {}: {}", s.name, to_string(dir), sh.to_string()));
      run_and_check(cuda, s, dir, r, d, i % 2 == 0);
    }
    ++i;
  }
  // The cuFFT work areas fitted in the reserve that workspace_bytes counts.
  CHECK(conv2d_cuda_fft_work_bytes_outside_workspace(cuda.ctx()) == 0);
}

// 3x3 stride 1: paddings 0-2 (asymmetric too), odd and even sizes, N = 1 and 3, C and K off
// multiples of 4 and 32, outputs of one pixel.
std::vector<Conv2dShape> winograd_shapes() {
  std::vector<Conv2dShape> shapes;
  const int64_t cks[][2] = {{1, 1}, {3, 5}, {5, 4}, {17, 33}, {33, 7}};
  const int64_t hws[][2] = {{7, 9}, {8, 5}, {3, 3}, {12, 13}};
  const int pads[][2] = {{0, 0}, {1, 1}, {2, 2}, {1, 2}, {2, 0}};
  int i = 0;
  for (auto& ck : cks)
    for (auto& hw : hws)
      for (auto& pad : pads) {
        const int64_t N = (i++ % 3 == 0) ? 1 : 3;
        shapes.push_back(
            Conv2dShape::make(N, ck[0], hw[0], hw[1], ck[1], 3, 3, 1, 1, pad[0], pad[1], 1, 1, 1, i % 2 == 0));
      }
  return shapes;
}

// Every stride, padding, dilation and groups mix for 1x1, 3x3 and 2x3 windows on odd sizes (the
// conv2d cuda sweep), channels off multiples of 4.
std::vector<Conv2dShape> im2col_shapes() {
  std::vector<Conv2dShape> shapes = test::conv_sweep_shapes(6, 10, false);
  shapes.push_back(Conv2dShape::make(2, 35, 15, 13, 37, 3, 3, 1, 1, 1, 1));  // C and K past 32
  return shapes;
}

// Stride 1 with filters from 1x1 to 11x11 (the FFT's home ground), paddings up to R - 1 and beyond.
std::vector<Conv2dShape> fft_shapes() {
  std::vector<Conv2dShape> shapes;
  const int filters[][2] = {{1, 1}, {3, 3}, {5, 5}, {2, 3}, {7, 5}, {11, 11}};
  int i = 0;
  for (auto& rs : filters)
    for (int pad : {0, 1, 3}) {
      const int64_t N = (i % 2) ? 1 : 3, C = 1 + (i * 5) % 7, K = 1 + (i * 3) % 9;
      const int64_t H = 11 + i % 4, W = 14 + i % 3;
      shapes.push_back(
          Conv2dShape::make(N, C, H, W, K, rs[0], rs[1], 1, 1, pad, pad == 3 ? 1 : pad, 1, 1, 1, i % 3 != 0));
      ++i;
    }
  shapes.push_back(Conv2dShape::make(2, 33, 27, 27, 17, 11, 11, 1, 1, 5, 5));  // AlexNet-like, channels past 32
  shapes.push_back(Conv2dShape::make(3, 19, 24, 24, 21, 5, 5, 1, 1, 0, 0));  // unpadded 24x24: x needs no padded copy
  // Our own transforms (conv2d_fft_transforms.h), each side, padded or not, with and without bias;
  // the others above take cuFFT's.
  shapes.push_back(Conv2dShape::make(2, 16, 6, 6, 17, 3, 3, 1, 1, 1, 1));             // 8x8
  shapes.push_back(Conv2dShape::make(3, 20, 13, 11, 16, 5, 3, 1, 1, 1, 2, 1, 1, 1, false));  // 16x16 (15x15)
  shapes.push_back(Conv2dShape::make(2, 16, 13, 13, 18, 3, 3, 1, 1, 0, 0));           // 16x16 (cuFFT's 14x14)
  shapes.push_back(Conv2dShape::make(2, 24, 32, 32, 18, 9, 9, 1, 1, 0, 0));           // 32x32, L3-like
  shapes.push_back(Conv2dShape::make(1, 17, 27, 27, 16, 7, 7, 1, 1, 2, 2, 1, 1, 1, false));  // 32x32 (31x31)
  shapes.push_back(Conv2dShape::make(1, 16, 60, 64, 16, 9, 9, 1, 1, 0, 0));           // 64x64 (cuFFT's 60x64)
  return shapes;
}

// Records `calls` on the context's stream into a CUDA graph and instantiates it. Global capture
// mode makes any allocation or synchronisation inside `calls` an error. On a throw the capture is
// ended, so the stream stays usable.
cudaGraphExec_t capture(CudaContext& cuda, const std::function<void()>& calls) {
  const cudaStream_t stream = static_cast<cudaStream_t>(cuda.ctx().cuda_stream);
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  try {
    calls();
  } catch (...) {
    if (cudaStreamEndCapture(stream, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
    cudaGetLastError();  // the failed capture's error is not sticky; clear it for the next test
    throw;
  }
  CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  CUDA_CHECK(instantiated);
  return exec;
}

}  // namespace

TEST_CASE("conv2d cuda winograd matches the cpu reference in every direction", "[gpu]") {
  CNN_REQUIRE_GPU();
  check_all(kWinograd, winograd_shapes(), {ConvDir::forward, ConvDir::backward_data, ConvDir::backward_filter});
}

TEST_CASE("conv2d cuda winograd forward and filter gradient take padding 3", "[gpu]") {
  CNN_REQUIRE_GPU();
  const Conv2dShape sh = Conv2dShape::make(2, 5, 6, 7, 3, 3, 3, 1, 1, 3, 3);
  REQUIRE_FALSE(conv2d_cuda_winograd_can_implement(sh, ConvDir::backward_data));
  check_all(kWinograd, {sh}, {ConvDir::forward, ConvDir::backward_filter});
}

// Shapes whose filter gradient splits each chunk's tile reduction (conv2d_winograd_cuda.cu's rule:
// 17 splits for K and C <= 128, 9 for C = 130, but none shorter than 1024 tiles), T odd so that it
// is no multiple of S and the last split ends in zero slots: T = 7803, S = 7; T = 2187, S = 2;
// T = 3773, S = 3 (padding 2, 0).
std::vector<Conv2dShape> winograd_split_shapes() {
  return {Conv2dShape::make(3, 5, 101, 101, 7, 3, 3, 1, 1, 1, 1, 1, 1, 1, true),
          Conv2dShape::make(3, 130, 53, 53, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, false),
          Conv2dShape::make(1, 17, 151, 99, 33, 3, 3, 1, 1, 2, 0, 1, 1, 1, true)};
}

// The split adds S partial filter gradients to the workspace, so backward_filter asks for more
// than the forward pass (the same V and M sizes at S = 1) exactly when it splits.
bool winograd_filter_gradient_splits(const Conv2dShape& sh) {
  return conv2d_cuda_winograd_workspace_bytes(sh, ConvDir::backward_filter) >
         conv2d_cuda_winograd_workspace_bytes(sh, ConvDir::forward);
}

TEST_CASE("conv2d cuda winograd filter gradient split into pieces matches the cpu reference", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  int i = 0;
  for (const Conv2dShape& sh : winograd_split_shapes()) {
    INFO(sh.to_string());
    CHECK(winograd_filter_gradient_splits(sh));
    CHECK_FALSE(winograd_filter_gradient_splits(Conv2dShape::make(sh.N, sh.C, 9, 9, sh.K, 3, 3, 1, 1, 1, 1)));
    const Reference r(sh, 211 + i);
    DeviceConv d(r);
    // Sums of 10^4 products: the transform tolerance (rounding scales with sum |x||dy|).
    for (ConvDir dir : kDirs) {
      INFO(to_string(dir));
      run_and_check(cuda, kWinograd, dir, r, d, i % 2 == 0, test::kGpuTransformVsCpu);
    }
    ++i;
  }
}

// 16*16*301*300 floats of tiles an image: chunks of 2 + 1 images (T = 180600, then 90300, neither
// a multiple of S = 17), the partials accumulating across chunks with slots of different lengths.
TEST_CASE("conv2d cuda winograd filter gradient splits pieces across several chunks", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const Conv2dShape sh = Conv2dShape::make(3, 5, 601, 599, 11, 3, 3, 1, 1, 1, 1);
  Conv2dShape twice = sh;
  twice.N *= 2;
  CHECK(winograd_filter_gradient_splits(sh));
  CHECK(conv2d_cuda_winograd_workspace_bytes(twice, ConvDir::backward_filter) ==
        conv2d_cuda_winograd_workspace_bytes(sh, ConvDir::backward_filter));
  const Reference r(sh, 17, true);
  DeviceConv d(r);
  run_and_check(cuda, kWinograd, ConvDir::backward_filter, r, d, true, kLongSums);
}

TEST_CASE("conv2d cuda winograd split filter gradient gives the same bits on every run", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const std::vector<Conv2dShape> shapes{winograd_split_shapes()[0],
                                        Conv2dShape::make(3, 5, 601, 599, 11, 3, 3, 1, 1, 1, 1)};
  for (const Conv2dShape& sh : shapes) {
    INFO(sh.to_string());
    REQUIRE(winograd_filter_gradient_splits(sh));
    const Reference r(sh, 43, true);
    DeviceConv d(r);
    run_and_check(cuda, kWinograd, ConvDir::backward_filter, r, d, true, kLongSums);
    const std::vector<float> first = d.dw.get();
    run_and_check(cuda, kWinograd, ConvDir::backward_filter, r, d, true, kLongSums);
    CHECK(compare(d.dw.get(), first, test::kExact) == "");
  }
}

TEST_CASE("conv2d cuda im2col gemm matches the cpu reference in every direction", "[gpu]") {
  CNN_REQUIRE_GPU();
  check_all(kIm2col, im2col_shapes(), {ConvDir::forward, ConvDir::backward_data, ConvDir::backward_filter});
}

TEST_CASE("conv2d cuda fft matches the cpu reference in every direction", "[gpu]") {
  CNN_REQUIRE_GPU();
  check_all(kFft, fft_shapes(), {ConvDir::forward, ConvDir::backward_data, ConvDir::backward_filter});
}

// One image's scratch is over half the 256 MiB chunk bound, so the batch runs in several chunks
// (and backward_filter accumulates across them); the FFT's filter-side transforms run in chunks
// of planes too, so its staging does not grow with K*C.
TEST_CASE("conv2d cuda strategies split large batches into chunks correctly", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  struct Case {
    Strategy s;
    Conv2dShape sh;
  };
  const std::vector<Case> cases{
      {kWinograd, Conv2dShape::make(3, 8, 723, 725, 8, 3, 3, 1, 1, 1, 1)},  // 16*16*362*363 floats a tile set
      {kIm2col, Conv2dShape::make(3, 8, 723, 725, 8, 3, 3, 1, 1, 1, 1)},    // 8*9*723*725 column floats
      {kFft, Conv2dShape::make(12, 4, 725, 723, 4, 5, 5, 1, 1, 2, 2)},      // ~8.5M floats an image: chunks of 7
      {kFft, Conv2dShape::make(4, 16, 500, 500, 16, 3, 3, 1, 1, 1, 1)},     // cuBLAS products, ~20M floats: 3 + 1;
                                                                           // filter planes 87 at a time: 3 chunks
      {kFft, Conv2dShape::make(2, 4, 500, 500, 40, 3, 3, 1, 1, 1, 1)},      // our products; filter planes 131 + 29
      {kFft, Conv2dShape::make(40, 256, 64, 64, 256, 1, 1, 1, 1, 0, 0)},    // our 64x64 transforms: 31 + 9 images
  };
  for (const Case& c : cases) {
    INFO(fmt::format("{}: {}", c.s.name, c.sh.to_string()));
    Conv2dShape twice = c.sh;
    twice.N *= 2;
    const Reference r(c.sh, 5, true);
    DeviceConv d(r);
    for (ConvDir dir : kDirs) {
      INFO(to_string(dir));
      // Chunked: doubling the batch adds no scratch.
      CHECK(c.s.workspace_bytes(twice, dir) == c.s.workspace_bytes(c.sh, dir));
      run_and_check(cuda, c.s, dir, r, d, true, kLongSums);
    }
  }
  CHECK(conv2d_cuda_fft_work_bytes_outside_workspace(cuda.ctx()) == 0);
}

TEST_CASE("conv2d cuda winograd im2col and fft give the same bits on every run", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const Conv2dShape small = Conv2dShape::make(3, 7, 13, 11, 9, 3, 3, 1, 1, 1, 1);
  const Conv2dShape own = Conv2dShape::make(2, 16, 14, 14, 17, 3, 3, 1, 1, 1, 1);  // the FFT's own 16x16 transforms
  const std::pair<const Strategy*, Conv2dShape> cases[] = {
      {&kWinograd, small}, {&kIm2col, small}, {&kFft, small}, {&kFft, own}};
  for (const auto& [s, sh] : cases) {
    const Reference r(sh, 77);
    DeviceConv d(r);
    for (ConvDir dir : kDirs) {
      INFO(fmt::format("{} {} {}", s->name, sh.to_string(), to_string(dir)));
      run_and_check(cuda, *s, dir, r, d, true);
      auto output = [&] {
        return dir == ConvDir::forward ? d.y.get() : dir == ConvDir::backward_data ? d.dx.get() : d.dw.get();
      };
      const std::vector<float> first = output(), first_db = d.db.get();
      run_and_check(cuda, *s, dir, r, d, true);
      const std::vector<float> again = output();
      CHECK(compare(again, first, test::kExact) == "");
      if (dir == ConvDir::backward_filter) CHECK(compare(d.db.get(), first_db, test::kExact) == "");
    }
  }
}

TEST_CASE("conv2d cuda winograd im2col and fft take operands off 16-byte alignment", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const Conv2dShape small = Conv2dShape::make(2, 5, 9, 10, 7, 3, 3, 1, 1, 1, 1);
  const Conv2dShape gemm = Conv2dShape::make(2, 16, 20, 20, 16, 5, 5, 1, 1, 0, 0);  // cuFFT's 20x20, no padded copy
  const Conv2dShape own = Conv2dShape::make(2, 16, 30, 31, 16, 5, 5, 1, 1, 1, 0);   // the FFT's own 32x32
  const std::pair<const Strategy*, Conv2dShape> cases[] = {
      {&kWinograd, small}, {&kIm2col, small}, {&kFft, small}, {&kFft, gemm}, {&kFft, own}};
  for (const auto& [s, sh] : cases) {
    const Reference r(sh, 91);
    DeviceConv d(r, 1);
    for (ConvDir dir : kDirs) {
      INFO(fmt::format("{} {} {}", s->name, sh.to_string(), to_string(dir)));
      run_and_check(cuda, *s, dir, r, d, true);
    }
  }
}

TEST_CASE("conv2d cuda strategies refuse shapes outside their rules", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const Conv2dShape strided = Conv2dShape::make(1, 2, 9, 9, 2, 3, 3, 2, 2, 1, 1);
  ConvOperandsF32 op;
  CHECK_THROWS_AS(conv2d_cuda_winograd_run(cuda.ctx(), strided, ConvDir::forward, op), Error);
  CHECK_THROWS_AS(conv2d_cuda_fft_run(cuda.ctx(), strided, ConvDir::forward, op), Error);
}

// What a captured training step needs: after one uncaptured call per direction (plans, workspace),
// the calls allocate nothing, never synchronise (global capture mode would fail them), and the
// replayed graph writes the same bits as the uncaptured calls. Each direction runs twice in the
// graph, as a step reusing a layer's workspace would. A fresh context per strategy, so the warm-up
// is the call that makes the cuFFT plans, and it shows that a call asks ctx.workspace for no more
// than workspace_bytes (the workspace grows to 1.5 times the largest request).
TEST_CASE("conv2d cuda fft winograd and im2col gemm replay from a cuda graph with the uncaptured results", "[gpu]") {
  CNN_REQUIRE_GPU();
  const Conv2dShape small = Conv2dShape::make(3, 7, 13, 11, 9, 3, 3, 1, 1, 1, 1);
  // The FFT's own 64x64 transforms, whose kernels ask for more than 48 KiB of shared memory.
  const Conv2dShape own = Conv2dShape::make(2, 16, 60, 60, 16, 5, 5, 1, 1, 2, 2);
  const std::pair<const Strategy*, Conv2dShape> cases[] = {
      {&kFft, small}, {&kFft, own}, {&kWinograd, small}, {&kIm2col, small}};
  for (const auto& [s, sh] : cases) {
    INFO(fmt::format("{}: {}", s->name, sh.to_string()));
    const Reference r(sh, 123);
    CudaContext cuda;
    DeviceConv d(r);
    size_t most = 0;
    std::vector<float> y, dx, dw, db;  // run_and_check poisons every output first: keep each direction's
    for (ConvDir dir : kDirs) {
      INFO(to_string(dir));
      run_and_check(cuda, *s, dir, r, d, true);  // the uncaptured warm-up, against the cpu
      most = std::max(most, s->workspace_bytes(sh, dir));
      CHECK(cuda.ctx().workspace->capacity_bytes() <= most + most / 2 + sizeof(float));
      if (dir == ConvDir::forward) y = d.y.get();
      if (dir == ConvDir::backward_data) dx = d.dx.get();
      if (dir == ConvDir::backward_filter) dw = d.dw.get(), db = d.db.get();
    }
    const size_t capacity = cuda.ctx().workspace->capacity_bytes();
    d.poison();
    ConvOperandsF32 op{d.x.data(), d.w.data(), d.b.data(), d.y.data(), d.dy.data(), d.dx.data(), d.dw.data(), d.db.data()};
    cudaGraphExec_t exec = capture(cuda, [&] {
      for (ConvDir dir : kDirs) {
        ConvOperandsF32 o = op;
        if (dir == ConvDir::backward_data) o.dw = nullptr, o.db = nullptr;
        s->run(cuda.ctx(), sh, dir, o);
        s->run(cuda.ctx(), sh, dir, o);
      }
    });
    CHECK(cuda.ctx().workspace->capacity_bytes() == capacity);
    CHECK(all_nan(d.y.get()));  // capturing ran nothing
    const cudaError_t launched = cudaGraphLaunch(exec, static_cast<cudaStream_t>(cuda.ctx().cuda_stream));
    const cudaError_t finished = cudaStreamSynchronize(static_cast<cudaStream_t>(cuda.ctx().cuda_stream));
    cudaGraphExecDestroy(exec);
    CUDA_CHECK(launched);
    CUDA_CHECK(finished);
    CHECK(compare(d.y.get(), y, test::kExact) == "");
    CHECK(compare(d.dx.get(), dx, test::kExact) == "");
    CHECK(compare(d.dw.get(), dw, test::kExact) == "");
    CHECK(compare(d.db.get(), db, test::kExact) == "");
    CHECK(conv2d_cuda_fft_work_bytes_outside_workspace(cuda.ctx()) == 0);
  }
}
