// cuDNN's BF16 and F16 convolution rows (conv2d_cudnn.cpp, dtypes bf16 and f16): listed like the f32
// ones, and every one of them, in every direction, against the CPU emulation: x, dy and w rounded
// to T (x, dy stored NHWC on the device, w given as its FP32 master), the bias rounded to T as
// these rows use it, the double reference on exactly those values (support/bf16_conv.h), and each
// output within one T rounding of it (kBf16OutputVsCpu, kF16OutputVsCpu: y and dx; dw too, which
// cuDNN writes in T; db an FP32 sum).
// Trap: cuDNN decides per shape and version which algorithms it takes in BF16: a row cuDNN refuses
// everywhere is warned about (as the harness's may_idle), but each direction's default row must run.
#include <map>
#include <string>
#include <vector>

#include "core/bf16.h"
#include "core/cuda_context.h"
#include "core/fp16.h"
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

// One shape's operands: support/bf16_conv.h's NHWC T activations, the FP32 master w (T-exact, so
// the rows' own cast is exact) and the double reference, the bias rounded as these rows use it.
template <typename T>
struct Operands {
  const test::Reference16<T>& r;
  test::NhwcOperands16<T> d;
  DeviceFloats w;
  explicit Operands(const test::Reference16<T>& ref) : r(ref), d(ref, 0, {}), w(test::widen(ref.w)) {}
  ConvOperands of(ConvDir dir) {
    const bool bias = r.sh.has_bias;
    ConvOperands op;
    if (dir != ConvDir::backward_data) op.x = ConstView(d.x.data());
    if (dir != ConvDir::forward) op.dy = ConstView(d.dy.data());
    if (dir != ConvDir::backward_filter) op.w = w.data();
    if (dir == ConvDir::forward) {
      op.b = bias ? d.b.data() : nullptr;
      op.y = View(d.y.data());
    }
    if (dir == ConvDir::backward_data) op.dx = View(d.dx.data());
    if (dir == ConvDir::backward_filter) {
      op.dw = d.dw.data();
      op.db = bias ? d.db.data() : nullptr;
    }
    return op;
  }
  // What `dir` wrote against the reference (y, dx channels-last), each within one T rounding.
  void check(ConvDir dir) const {
    const test::Tolerance tol = test::output_tolerance<T>();
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

// The rows of dtype t mirror the f32 ones: names, directions, determinism, tensor cores whatever
// the call allows, the accuracy rule (winograd_nonfused everywhere, algo_0 for the filter gradient)
// and, without a GPU, the default row's answer from the shape (forward with a bias refused).
void check_mirror(DType t) {
  const std::vector<ConvAlgo> f32 = test::named_conv_algos(Backend::cudnn);
  const std::vector<ConvAlgo> bf = test::named_conv_algos(Backend::cudnn, t);
  REQUIRE(bf.size() == f32.size());
  REQUIRE(bf.size() == 20);
  const Conv2dShape sh = Conv2dShape::make(2, 8, 12, 12, 16, 3, 3, 1, 1, 1, 1);
  const ExecContext cpu = ExecContext::cpu(1);
  for (size_t i = 0; i < bf.size(); ++i) {
    INFO(bf[i].name << " " << to_string(bf[i].dir));
    CHECK(bf[i].dtype == t);
    CHECK(bf[i].name == f32[i].name);
    CHECK(bf[i].dir == f32[i].dir);
    CHECK(bf[i].deterministic == f32[i].deterministic);
    CHECK(!bf[i].follows_math);  // 16-bit tensor cores whatever the call allows
    const bool bad_filter = bf[i].dir == ConvDir::backward_filter && bf[i].name == "cudnn:algo_0";
    CHECK(conv2d_cudnn_algo_accurate(bf[i].dir, bf[i].name, sh, t) ==
          (bf[i].name != "cudnn:winograd_nonfused" && !bad_filter));
    CHECK(!bf[i].can_implement(cpu, sh));  // needs a CUDA context with cuDNN
  }
  for (ConvDir d : kDirs) {
    const ConvAlgo* def = find_impl(conv2d_table(d), Backend::cudnn, t);
    REQUIRE(def);
    CHECK(def->name == "cudnn");
    // A shape question without a GPU: from the shape (forward with a bias refused: double rounding).
    CHECK(def->can_implement(cpu, sh) == (d != ConvDir::forward || !sh.has_bias));
    CHECK(find_impl(conv2d_table(d), Backend::cudnn, DType::f32) != def);
  }
}

// Every row of T's dtype on every shape it takes, against the reference.
template <typename T>
void check_every_row(DType t) {
  CudaContext cuda;
  const ExecContext& ctx = cuda.ctx();
  std::map<std::string, int> ran;  // "name direction" -> runs
  uint64_t seed = 4100;
  for (const Conv2dShape& sh : shapes()) {
    const test::Reference16<T> r(sh, seed += 10, true);
    Operands<T> o(r);
    for (ConvDir dir : kDirs)
      for (const ConvAlgo& a : conv2d_table(dir).rows) {
        if (a.backend != Backend::cudnn || a.dtype != t) continue;
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
    if (runs == 0) WARN(what << " (" << to_string(t) << ") accepted none of the shapes");
}

// The dispatcher's choice of the default rows for T operands.
template <typename T>
void check_dispatch() {
  CudaContext cuda;
  const ExecContext& ctx = cuda.ctx();
  const test::Reference16<T> r(Conv2dShape::make(2, 64, 12, 12, 64, 3, 3, 1, 1, 1, 1), 4500, true);
  Operands<T> o(r);
  o.d.poison();
  const ConvOperands f = o.of(ConvDir::forward), g = o.of(ConvDir::backward_data), h = o.of(ConvDir::backward_filter);
  run_op(Backend::cudnn, Conv2dForward{&ctx, r.sh, f.x, f.w, f.b, f.y});
  run_op(Backend::cudnn, Conv2dBackwardData{&ctx, r.sh, g.w, g.dy, g.dx});
  run_op(Backend::cudnn, Conv2dBackwardFilter{&ctx, r.sh, h.x, h.dy, h.dw, h.db});
  cuda.synchronize();
  for (ConvDir dir : kDirs) o.check(dir);
}

}  // namespace

TEST_CASE("cudnn conv2d bf16 rows mirror the f32 ones by name, determinism and accuracy rule", "[cpu]") {
  check_mirror(DType::bf16);
}
TEST_CASE("cudnn conv2d f16 rows mirror the f32 ones by name, determinism and accuracy rule", "[cpu]") {
  check_mirror(DType::f16);
}

TEST_CASE("every cudnn bf16 conv2d row matches the cpu emulation in every direction", "[gpu]") {
  CNN_REQUIRE_GPU();
  check_every_row<bf16>(DType::bf16);
}
TEST_CASE("every cudnn f16 conv2d row matches the cpu emulation in every direction", "[gpu]") {
  CNN_REQUIRE_GPU();
  check_every_row<f16>(DType::f16);
}

TEST_CASE("the dispatcher runs the cudnn bf16 default rows for bf16 operands", "[gpu]") {
  CNN_REQUIRE_GPU();
  check_dispatch<bf16>();
}
TEST_CASE("the dispatcher runs the cudnn f16 default rows for f16 operands", "[gpu]") {
  CNN_REQUIRE_GPU();
  check_dispatch<f16>();
}
