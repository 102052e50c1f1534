// The probe operands on the GPU (tune/probe_operands.h): values made by the kernel are the host's
// within a few ulps (the GPU's log, sin and cos), in f32 and rounded to bf16; the device's relative
// L2 sums equal the host's within rounding and repeat bit for bit. The f32 conv probe, whose x is
// made and whose y and dx are compared on the device, still measures an algorithm 1% off as 1e-2,
// one that writes nothing as NaN, and one that is off on non-negative x only through set 1.
#include <cmath>
#include <vector>

#include "core/bf16.h"
#include "core/cuda_context.h"
#include "ops/conv2d.h"
#include "support/catch.h"
#include "tune/conv_accuracy.h"
#include "tune/probe_operands.h"

using namespace cnn;

namespace {

std::vector<float> download(const Tensor& t) { return t.to_vector(); }

}  // namespace

TEST_CASE("probe operands made on the gpu are the host's values, and gpu relative L2 sums are the host's", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const Shape shape{8, 6, 40, 41};  // more than two chunks of the L2 sums, an odd count per channel
  ProbeFill normal;
  normal.seed = 5;
  normal.scale = 0.5f;
  normal.channel_step = 4.0f;
  ProbeFill relu = normal;
  relu.channel_step = 0.0f;
  relu.relu = true;
  ProbeFill uniform;
  uniform.seed = 6;
  uniform.normal = false;
  uniform.lo = -0.5f;
  for (const ProbeFill& f : {normal, relu, uniform}) {
    INFO("normal " << f.normal << ", relu " << f.relu << ", channel step " << f.channel_step);
    const std::vector<float> host = probe_values(f, shape, 2);
    const std::vector<float> dev = download(probe_tensor(cuda.ctx(), shape, f));
    REQUIRE(dev.size() == host.size());
    int64_t far = 0;
    for (size_t i = 0; i < host.size(); ++i) far += !(std::fabs(dev[i] - host[i]) <= 1e-6f + 1e-5f * std::fabs(host[i]));
    CHECK(far == 0);
  }
  // bf16 (channels-last storage, so no channel step): the same values rounded once, an ulp apart
  // where the f32 values straddle a rounding point.
  for (const ProbeFill& f : {relu, uniform}) {
    INFO("bf16, normal " << f.normal);
    const std::vector<float> want = probe_values(f, shape, 2);
    const std::vector<float> b16 = download(probe_tensor(cuda.ctx(), shape, f, DType::bf16));
    REQUIRE(b16.size() == want.size());
    int64_t off = 0;
    for (size_t i = 0; i < want.size(); ++i)
      off += !(std::fabs(b16[i] - round_to_bf16(want[i])) <= std::ldexp(std::fabs(want[i]), -7) + 1e-30f);
    CHECK(off == 0);
  }
  const std::vector<float> ref = probe_values(normal, shape, 2);
  std::vector<float> got = probe_normals(shape.numel(), 1e-3f, 9);
  for (size_t i = 0; i < got.size(); ++i) got[i] += ref[i];
  const Tensor dgot = probe_upload(got, shape, Device::cuda), dref = probe_upload(ref, shape, Device::cuda);
  const L2Sums h = l2_sums(got.data(), ref.data(), shape.numel(), 2);
  const L2Sums d = l2_sums(cuda.ctx(), dgot, dref);
  CHECK(d.diff == Approx(h.diff).epsilon(1e-12));
  CHECK(d.norm == Approx(h.norm).epsilon(1e-12));
  const L2Sums again = l2_sums(cuda.ctx(), dgot, dref);
  CHECK(again.diff == d.diff);
  CHECK(again.norm == d.norm);
}

TEST_CASE("the f32 conv probe on the gpu compares on the device and still measures what is off", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const ExecContext& ctx = cuda.ctx();
  const Conv2dShape sh = Conv2dShape::make(6, 5, 17, 15, 7, 3, 3, 1, 1, 1, 1);
  const int64_t ys = sh.N * sh.K * sh.P * sh.Q, xs = sh.N * sh.C * sh.H * sh.W;
  ConvProbe probe(ctx, sh);
  const ConvAlgo exact = conv2d_algo(ConvDir::forward, "cuda:direct");
  CHECK(probe.run_and_compare(exact) < 1e-5);
  // y * factor through the host, when x is non-negative only if `only_nonnegative`.
  auto scaled = [&](float factor, bool only_nonnegative) {
    ConvAlgo a = exact;
    a.run = [exact, &cuda, xs, ys, factor, only_nonnegative](const ExecContext& c, const Conv2dShape& s,
                                                             const ConvOperands& op) {
      exact.run(c, s, op);
      cuda.synchronize();
      std::vector<float> x(static_cast<size_t>(xs)), y(static_cast<size_t>(ys));
      device_memcpy(x.data(), Device::cpu, op.x.f32(), Device::cuda, x.size() * sizeof(float));
      bool nonnegative = true;
      for (float v : x) nonnegative = nonnegative && v >= 0;
      if (only_nonnegative && !nonnegative) return;
      device_memcpy(y.data(), Device::cpu, op.y.f32(), Device::cuda, y.size() * sizeof(float));
      for (float& v : y) v *= factor;
      device_memcpy(op.y.f32(), Device::cuda, y.data(), Device::cpu, y.size() * sizeof(float));
    };
    return a;
  };
  CHECK(probe.run_and_compare(scaled(1.01f, false)) == Approx(0.01).epsilon(1e-3));
  CHECK(probe.run_and_compare(scaled(1.02f, true)) == Approx(0.02).epsilon(1e-3));
  ConvAlgo idle = exact;
  idle.run = [](const ExecContext&, const Conv2dShape&, const ConvOperands&) {};
  CHECK(std::isnan(probe.run_and_compare(idle)));
  // worst_error after runs on set 0 whose reference was not made yet (a fresh probe).
  ConvProbe fresh(ctx, sh, 3);
  const ConvAlgo off = scaled(1.01f, false);
  fresh.poison(ConvDir::forward);
  off.run(ctx, sh, fresh.operands(ConvDir::forward));
  CHECK(fresh.worst_error(off) == Approx(0.01).epsilon(1e-3));
  // Backward data is compared on the device too; backward filter on the host.
  for (ConvDir d : {ConvDir::backward_data, ConvDir::backward_filter})
    CHECK(probe.run_and_compare(conv2d_algo(d, "cuda:direct")) < 1e-5);
}
