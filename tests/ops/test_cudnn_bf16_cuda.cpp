// cuDNN's BF16 convolution rows (conv2d_cudnn.cpp, dtype bf16): listed like the f32 ones, and every
// one of them, in every direction, against the CPU emulation: x, dy and w rounded to bf16 (x, dy
// stored NHWC on the device, w given as its FP32 master), the bias rounded to bf16 as these rows
// use it, the double reference on exactly those values (support/bf16_conv.h), and each output
// within kBf16OutputVsCpu of it (one bf16 rounding of y and dx; dw too, which cuDNN writes in
// bf16; db an FP32 sum).
// Trap: cuDNN decides per shape and version which algorithms it takes in BF16: a row cuDNN refuses
// everywhere is warned about (as the harness's may_idle), but each direction's default row must run.
#include <map>
#include <string>
#include <vector>

#include "core/cuda_context.h"
#include "ops/conv2d.h"
#include "ops/conv2d_algo.h"
#include "support/bf16_conv.h"
#include "support/catch.h"
#include "support/conv_sweep.h"
#include "support/device_floats.h"
#include "support/test_util.h"
#include "support/tolerance.h"

using namespace cnn;
using test::DeviceFloats;

namespace {

const ConvDir kDirs[] = {ConvDir::forward, ConvDir::backward_data, ConvDir::backward_filter};

// One shape's operands: support/bf16_conv.h's NHWC bf16 activations, the FP32 master w (bf16-exact,
// so the rows' own cast is exact) and the double reference, the bias rounded as these rows use it.
struct Operands {
  const test::Bf16Reference& r;
  test::Bf16NhwcOperands d;
  DeviceFloats w;
  explicit Operands(const test::Bf16Reference& ref) : r(ref), d(ref, 0, {}), w(test::widen(ref.w)) {}
  ConvOperands of(ConvDir dir) {
    const bool bias = r.sh.has_bias;
    ConvOperands op;
    if (dir != ConvDir::backward_data) op.x = ConstView(d.x.data(), DType::bf16);
    if (dir != ConvDir::forward) op.dy = ConstView(d.dy.data(), DType::bf16);
    if (dir != ConvDir::backward_filter) op.w = w.data();
    if (dir == ConvDir::forward) {
      op.b = bias ? d.b.data() : nullptr;
      op.y = View(d.y.data(), DType::bf16);
    }
    if (dir == ConvDir::backward_data) op.dx = View(d.dx.data(), DType::bf16);
    if (dir == ConvDir::backward_filter) {
      op.dw = d.dw.data();
      op.db = bias ? d.db.data() : nullptr;
    }
    return op;
  }
  // What `dir` wrote against the reference (y, dx channels-last), each within one bf16 rounding.
  void check(ConvDir dir) const {
    const test::Tolerance tol = test::kBf16OutputVsCpu;
    if (dir == ConvDir::forward) CHECK(test::compare(d.y.get(), d.y_ref, tol) == "");
    if (dir == ConvDir::backward_data) CHECK(test::compare(d.dx.get(), d.dx_ref, tol) == "");
    if (dir == ConvDir::backward_filter) {
      CHECK(test::compare(d.dw.get(), r.dw, tol) == "");
      if (r.sh.has_bias) CHECK(test::compare(d.db.get(), r.db, tol) == "");
    }
  }
};

// VGG-like 3x3 C = K = 64, a 1x1, strided and 5x5 windows, N from 1 to 8, K = 7 and C = 3 (no
// 16-byte channel runs), a batch whose bias gradient spans several 512-row chunks.
std::vector<Conv2dShape> shapes() {
  return {
      Conv2dShape::make(2, 64, 12, 12, 64, 3, 3, 1, 1, 1, 1),
      Conv2dShape::make(4, 32, 8, 8, 48, 1, 1, 1, 1, 0, 0, 1, 1, 1, false),
      Conv2dShape::make(8, 16, 9, 9, 24, 3, 3, 2, 2, 1, 1),
      Conv2dShape::make(3, 8, 7, 10, 16, 5, 5, 1, 1, 2, 2),
      Conv2dShape::make(1, 3, 11, 9, 8, 3, 3, 1, 1, 1, 1),
      Conv2dShape::make(2, 8, 6, 6, 7, 3, 3, 1, 1, 1, 1, 1, 1, 1, true),
      Conv2dShape::make(8, 16, 16, 16, 32, 3, 3, 1, 1, 1, 1),
  };
}

}  // namespace

TEST_CASE("cudnn conv2d bf16 rows mirror the f32 ones by name, determinism and accuracy rule", "[cpu]") {
  const std::vector<ConvAlgo> f32 = test::named_conv_algos(Backend::cudnn);
  const std::vector<ConvAlgo> bf = test::named_conv_algos(Backend::cudnn, DType::bf16);
  REQUIRE(bf.size() == f32.size());
  REQUIRE(bf.size() == 20);
  const Conv2dShape sh = Conv2dShape::make(2, 8, 12, 12, 16, 3, 3, 1, 1, 1, 1);
  const ExecContext cpu = ExecContext::cpu(1);
  for (size_t i = 0; i < bf.size(); ++i) {
    INFO(bf[i].name << " " << to_string(bf[i].dir));
    CHECK(bf[i].dtype == DType::bf16);
    CHECK(bf[i].name == f32[i].name);
    CHECK(bf[i].dir == f32[i].dir);
    CHECK(bf[i].deterministic == f32[i].deterministic);
    CHECK(!bf[i].follows_math);  // BF16 tensor cores whatever the call allows
    const bool bad_filter = bf[i].dir == ConvDir::backward_filter && bf[i].name == "cudnn:algo_0";
    CHECK(conv2d_cudnn_algo_accurate(bf[i].dir, bf[i].name, sh, DType::bf16) ==
          (bf[i].name != "cudnn:winograd_nonfused" && !bad_filter));
    CHECK(!bf[i].can_implement(cpu, sh));  // needs a CUDA context with cuDNN
  }
  for (ConvDir d : kDirs) {
    const ConvAlgo* def = find_impl(conv2d_table(d), Backend::cudnn, DType::bf16);
    REQUIRE(def);
    CHECK(def->name == "cudnn");
    // A shape question without a GPU: from the shape (forward with a bias refused: double rounding).
    CHECK(def->can_implement(cpu, sh) == (d != ConvDir::forward || !sh.has_bias));
    CHECK(find_impl(conv2d_table(d), Backend::cudnn, DType::f32) != def);
  }
}

TEST_CASE("every cudnn bf16 conv2d row matches the cpu emulation in every direction", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const ExecContext& ctx = cuda.ctx();
  std::map<std::string, int> ran;  // "name direction" -> runs
  uint64_t seed = 4100;
  for (const Conv2dShape& sh : shapes()) {
    const test::Bf16Reference r(sh, seed += 10, true);
    Operands o(r);
    for (ConvDir dir : kDirs)
      for (const ConvAlgo& a : conv2d_table(dir).rows) {
        if (a.backend != Backend::cudnn || a.dtype != DType::bf16) continue;
        const std::string what = a.name + " " + to_string(dir);
        ran.emplace(what, 0);
        if (!a.can_implement(ctx, sh) || a.workspace_bytes(ctx, sh) > ctx.workspace_limit_bytes) continue;
        INFO(what << " on " << sh.to_string());
        o.d.poison();
        a.run(ctx, sh, o.of(dir));
        cuda.synchronize();
        o.check(dir);
        ++ran[what];
      }
  }
  for (ConvDir dir : kDirs) {
    INFO(to_string(dir));
    CHECK(ran["cudnn " + std::string(to_string(dir))] > 0);
  }
  for (const auto& [what, runs] : ran)
    if (runs == 0) WARN(what << " (bf16) accepted none of the shapes");
}

TEST_CASE("the dispatcher runs the cudnn bf16 default rows for bf16 operands", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const ExecContext& ctx = cuda.ctx();
  const test::Bf16Reference r(Conv2dShape::make(2, 64, 12, 12, 64, 3, 3, 1, 1, 1, 1), 4500, true);
  Operands o(r);
  o.d.poison();
  const ConvOperands f = o.of(ConvDir::forward), g = o.of(ConvDir::backward_data), h = o.of(ConvDir::backward_filter);
  run_op(Backend::cudnn, Conv2dForward{&ctx, r.sh, f.x, f.w, f.b, f.y});
  run_op(Backend::cudnn, Conv2dBackwardData{&ctx, r.sh, g.w, g.dy, g.dx});
  run_op(Backend::cudnn, Conv2dBackwardFilter{&ctx, r.sh, h.x, h.dy, h.dw, h.db});
  cuda.synchronize();
  for (ConvDir dir : kDirs) o.check(dir);
}
