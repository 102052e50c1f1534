// The cuda bf16 (and f16) rows of conv2d (conv2d_algo_bf16_cuda.cpp) as the dispatcher and the
// autotuner call them, beyond the harness (test_backend_ops_conv2d.cpp, whose weights are exact):
// with FP32 master weights that are not exact in bf16 (f16) they agree with the cpu emulation,
// which rounds the weights at the same point; each call stays within the workspace its row declares (the packed copy
// after the kernel's scratch, a workspace grown once to workspace_bytes never grows again, which
// CUDA graph capture needs); and a tight workspace limit still leaves a plan within it.
#include <cmath>
#include <string>
#include <vector>

#include "core/cuda_context.h"
#include "core/tensor.h"
#include "ops/conv2d_algo.h"
#include "ops/convert.h"
#include "support/catch.h"
#include "support/test_util.h"
#include "support/tolerance.h"

using namespace cnn;

namespace {

const ConvDir kDirs[] = {ConvDir::forward, ConvDir::backward_data, ConvDir::backward_filter};

// Two results rounded to bf16 from FP32 sums taken in different orders: one bf16 ulp apart at most.
constexpr test::Tolerance kOneBf16Ulp{1e-4, 1.0 / 128};
// The same in f16 (10 mantissa bits).
constexpr test::Tolerance kOneF16Ulp{1e-4, 1.0 / 1024};
// dw and db, FP32 sums of up to 72000 products of values in [-1, 1] (so |dw| ~ 90) in two orders:
// ~1e-6 of that apart, which atol 1e-2 leaves room for where a sum comes out near zero.
constexpr test::Tolerance kLongFp32Sums{1e-2, 1e-3};
// The same sums when a tight workspace leaves no room for split partials: all 72000 products in
// one slice on the tensor cores, whose FP32 accumulation drifts with the length (measured on the
// H200: 1.3e-2 at |dw| ~ 90, 1.4e-4 of the scale); the default plan caps a slice at 64K pixels.
constexpr test::Tolerance kOneSliceSums{5e-2, 1e-3};

// The operands of one shape on one device: x, y, dy, dx of dtype t (bf16 by default, or f16)
// channels-last from NCHW host values (x and dy exact in t), w and b FP32 (w deliberately not exact
// in t), dw and db FP32.
struct Operands {
  Conv2dShape sh;
  DType t;
  Tensor x, w, b, y, dy, dx, dw, db;
  Operands(const Conv2dShape& s, Device dev, uint64_t seed, DType dtype = DType::bf16) : sh(s), t(dtype) {
    const Shape in{sh.N, sh.C, sh.H, sh.W}, out{sh.N, sh.K, sh.P, sh.Q};
    x = activation(test::random_floats(size_t(in.numel()), seed), in, dev, t);
    dy = activation(test::random_floats(size_t(out.numel()), seed + 1), out, dev, t);
    w = floats(test::random_floats(size_t(sh.weight_numel()), seed + 2), dev);
    b = floats(test::random_floats(size_t(sh.K), seed + 3), dev);
    y = Tensor::empty(out, dev, "test y", t);
    dx = Tensor::empty(in, dev, "test dx", t);
    dw = Tensor::empty(Shape{sh.weight_numel()}, dev, "test dw");
    db = Tensor::empty(Shape{sh.K}, dev, "test db");
  }
  static Tensor activation(const std::vector<float>& nchw, const Shape& s, Device dev, DType dtype) {
    std::vector<uint16_t> h(nchw.size());
    narrow(nchw.data(), ActDims{s[0], s[1], s[2], s[3]}, View(h.data(), dtype));
    Tensor t = Tensor::empty(s, dev, "test activation", dtype);
    device_memcpy(t.raw(), dev, h.data(), Device::cpu, t.bytes());
    return t;
  }
  static Tensor floats(const std::vector<float>& v, Device dev) {
    Tensor t = Tensor::empty(Shape{int64_t(v.size())}, dev, "test floats");
    device_memcpy(t.raw(), dev, v.data(), Device::cpu, t.bytes());
    return t;
  }
  ConvOperands of(ConvDir d) {
    ConvOperands op;
    // b only with a bias: the rows add a bias they are given, whatever sh.has_bias says
    if (d == ConvDir::forward) op.x = x.view(), op.w = w.view(), op.b = sh.has_bias ? b.view() : nullptr, op.y = y.view();
    if (d == ConvDir::backward_data) op.w = w.view(), op.dy = dy.view(), op.dx = dx.view();
    if (d == ConvDir::backward_filter) op.x = x.view(), op.dy = dy.view(), op.dw = dw.view(), op.db = db.view();
    return op;
  }
  // d's outputs on the host: y or dx (NCHW, widened), or dw then db.
  std::vector<float> output(ConvDir d) const {
    if (d == ConvDir::backward_filter) {
      std::vector<float> v = dw.to_vector(), g = db.to_vector();
      v.insert(v.end(), g.begin(), g.end());
      return v;
    }
    const Tensor& t = d == ConvDir::forward ? y : dx;
    std::vector<uint16_t> h(size_t(t.numel()));
    device_memcpy(h.data(), Device::cpu, t.raw(), t.device(), t.bytes());
    return widen(ConstView(h.data(), t.dtype()), ActDims{t.shape()[0], t.shape()[1], t.shape()[2], t.shape()[3]});
  }
};

// What Workspace::get leaves as capacity after its largest request was `bytes`.
size_t grown_capacity(size_t bytes) {
  const size_t floats = (bytes + sizeof(float) - 1) / sizeof(float);
  return floats == 0 ? 0 : (floats + floats / 2) * sizeof(float);
}

// Vector and scalar GEMM paths, a split filter gradient (N*P*Q past 64K), depthwise with a channel
// multiplier, a C == 1 first layer.
std::vector<Conv2dShape> shapes() {
  return {
      Conv2dShape::make(2, 16, 9, 9, 32, 3, 3, 1, 1, 1, 1),
      Conv2dShape::make(2, 5, 9, 7, 7, 3, 3, 2, 2, 1, 1),
      Conv2dShape::make(80, 8, 30, 30, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, false),
      Conv2dShape::make(2, 8, 9, 9, 16, 3, 3, 1, 1, 1, 1, 1, 1, 8),
      Conv2dShape::make(4, 1, 12, 12, 8, 5, 5, 1, 1, 2, 2),
  };
}

std::vector<const ConvAlgo*> cuda_rows(ConvDir d, DType t) {
  return {&conv2d_algo(d, "cuda:igemm_nhwc", t), &conv2d_algo(d, "cuda:direct_nhwc", t),
          find_impl(conv2d_table(d), Backend::cuda, t)};
}

// Every cuda row of dtype t on every shape it takes, against the cpu row of t on the same operands.
void check_rows_on_masters(DType t) {
  const ExecContext cpu = ExecContext::cpu(2);
  const test::Tolerance one_ulp = t == DType::f16 ? kOneF16Ulp : kOneBf16Ulp;
  uint64_t seed = 900;
  int runs = 0;
  for (const Conv2dShape& sh : shapes()) {
    Operands host(sh, Device::cpu, seed += 10, t);
    for (ConvDir d : kDirs) {
      find_impl(conv2d_table(d), Backend::cpu, t)->run(cpu, sh, host.of(d));
      const std::vector<float> want = host.output(d);
      for (const ConvAlgo* a : cuda_rows(d, t)) {
        REQUIRE(a);
        INFO(sh.to_string() << " " << to_string(d) << " " << a->name);
        if (!a->can_implement(cpu, sh)) continue;  // a question about the shape alone
        CudaContext cuda;  // a fresh workspace: what the call takes is all it holds afterwards
        const size_t bytes = a->workspace_bytes(cuda.ctx(), sh);
        Operands dev(sh, Device::cuda, seed, t);
        a->run(cuda.ctx(), sh, dev.of(d));
        cuda.synchronize();
        CHECK(cuda.ctx().workspace->capacity_bytes() <= grown_capacity(bytes));
        CHECK(test::compare(dev.output(d), want, d == ConvDir::backward_filter ? kLongFp32Sums : one_ulp) == "");
        ++runs;
      }
    }
  }
  CHECK(runs >= 30);
}

}  // namespace

TEST_CASE("conv2d cuda bf16 rows match the cpu emulation on FP32 master weights within their workspace", "[gpu]") {
  CNN_REQUIRE_GPU();
  check_rows_on_masters(DType::bf16);
}

TEST_CASE("conv2d cuda f16 rows match the cpu emulation on FP32 master weights within their workspace", "[gpu]") {
  CNN_REQUIRE_GPU();
  check_rows_on_masters(DType::f16);
}

TEST_CASE("conv2d cuda bf16 rows keep within a tight workspace limit and stay correct", "[gpu]") {
  CNN_REQUIRE_GPU();
  const Conv2dShape sh = Conv2dShape::make(80, 16, 30, 30, 32, 3, 3, 1, 1, 1, 1);
  const ExecContext cpu = ExecContext::cpu(2);
  Operands host(sh, Device::cpu, 77);
  for (ConvDir d : kDirs) {
    find_impl(conv2d_table(d), Backend::cpu, DType::bf16)->run(cpu, sh, host.of(d));
    const std::vector<float> want = host.output(d);
    const ConvAlgo& a = conv2d_algo(d, "cuda:igemm_nhwc", DType::bf16);
    CudaContext cuda;
    const size_t roomy = a.workspace_bytes(cuda.ctx(), sh);
    // The packed weights (32 x 3 x 3 x 16 bf16 = 9 KiB) and a little more: no split partials fit.
    cuda.ctx().workspace_limit_bytes = 16 << 10;
    const size_t tight = a.workspace_bytes(cuda.ctx(), sh);
    INFO(to_string(d) << ": " << roomy << " bytes unlimited, " << tight << " under the limit");
    CHECK(tight <= cuda.ctx().workspace_limit_bytes);
    Operands dev(sh, Device::cuda, 77);
    a.run(cuda.ctx(), sh, dev.of(d));
    cuda.synchronize();
    CHECK(cuda.ctx().workspace->capacity_bytes() <= grown_capacity(tight));
    CHECK(test::compare(dev.output(d), want, d == ConvDir::backward_filter ? kOneSliceSums : kOneBf16Ulp) == "");
  }
}
