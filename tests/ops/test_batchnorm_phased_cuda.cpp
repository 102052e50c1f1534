// Phased batchnorm CUDA kernels against the CPU phased ops: per-part sums (a part may be empty)
// added on the host as the all-reduce would, then apply, backward sums and dx, with and without
// each fused activation, odd and float4-friendly sizes, aligned and misaligned pointers.
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "core/tensor.h"
#include "ops/batchnorm.h"
#include "support/batchnorm_shape.h"
#include "support/catch.h"
#include "support/device_floats.h"
#include "support/test_util.h"
#include "support/tolerance.h"

using namespace cnn;
using cnn::test::compare;
using cnn::test::DeviceFloats;
using cnn::test::kGpuVsCpu;

using cnn::test::make_batchnorm_shape;

namespace {

// n doubles on the device, in float-typed storage.
struct DeviceDoubles {
  explicit DeviceDoubles(const std::vector<double>& v)
      : n(v.size()), storage(Tensor::empty(Shape{int64_t(2 * v.size())}, Device::cuda, "test doubles")) {
    device_memcpy(storage.data(), Device::cuda, v.data(), Device::cpu, n * sizeof(double));
  }
  double* data() { return reinterpret_cast<double*>(storage.data()); }
  std::vector<double> get() const {
    std::vector<double> v(n);
    device_memcpy(v.data(), Device::cpu, storage.data(), Device::cuda, n * sizeof(double));
    return v;
  }
  size_t n;
  Tensor storage;
};

std::vector<float> to_float(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

struct Result {
  std::vector<float> y, rm, rv, sm, sis, dx, dg, db, yi;
  std::vector<double> stats, sums;
};

// parts: sample counts of the "ranks"; all rows of one tensor, rank r's rows after rank r-1's.
Result run_cpu(const std::vector<int64_t>& parts, int64_t C, int64_t H, int64_t W, const std::vector<float>& x,
               const std::vector<float>& gamma, const std::vector<float>& beta, const std::vector<float>& dy,
               const std::vector<float>& rm0, const std::vector<float>& rv0, const ActivationParams* act) {
  const ExecContext ctx = ExecContext::cpu(1);
  const int64_t HW = H * W;
  const size_t S = size_t(2 * C + 1);
  Result r{std::vector<float>(x.size()), rm0, rv0, std::vector<float>(C), std::vector<float>(C),
           std::vector<float>(x.size()), std::vector<float>(C, 0.0f), std::vector<float>(C, 0.0f),
           std::vector<float>(x.size()), std::vector<double>(S, 0.0), std::vector<double>(S, 0.0)};
  int64_t at = 0;
  for (int64_t p : parts) {
    std::vector<double> mine(S);
    run_op(Backend::cpu, BatchnormForwardStats{&ctx, make_batchnorm_shape(p, C, H, W), x.data() + at * C * HW, rm0.data(), mine.data()});
    for (size_t i = 0; i < S; ++i) r.stats[i] += mine[i];
    at += p;
  }
  at = 0;
  for (int64_t p : parts) {
    const int64_t off = at * C * HW;
    std::vector<float> rm = rm0, rv = rv0, dg(C), db(C);
    std::vector<double> mine(S);
    run_op(Backend::cpu, BatchnormForwardApply{&ctx, make_batchnorm_shape(p, C, H, W), r.stats.data(), x.data() + off, gamma.data(),
                                beta.data(), act, r.y.data() + off, rm.data(), rv.data(), r.sm.data(), r.sis.data()});
    r.rm = rm;
    r.rv = rv;
    run_op(Backend::cpu, BatchnormBackwardStats{&ctx, make_batchnorm_shape(p, C, H, W), x.data() + off, r.y.data() + off, act, r.sm.data(),
                                 r.sis.data(), dy.data() + off, mine.data(), dg.data(), db.data()});
    for (size_t i = 0; i < S; ++i) r.sums[i] += mine[i];
    for (int64_t c = 0; c < C; ++c) {
      r.dg[size_t(c)] += dg[size_t(c)];
      r.db[size_t(c)] += db[size_t(c)];
    }
    at += p;
  }
  at = 0;
  for (int64_t p : parts) {
    const int64_t off = at * C * HW;
    run_op(Backend::cpu, BatchnormBackwardApply{&ctx, make_batchnorm_shape(p, C, H, W), r.sums.data(), x.data() + off, r.y.data() + off, act,
                                 gamma.data(), r.sm.data(), r.sis.data(), dy.data() + off, r.dx.data() + off});
    at += p;
  }
  int64_t N = 0;
  for (int64_t p : parts) N += p;
  run_op(Backend::cpu, BatchnormForwardInferAct{&ctx, make_batchnorm_shape(N, C, H, W), x.data(), gamma.data(), beta.data(), rm0.data(),
                                  rv0.data(), act, r.yi.data()});
  return r;
}

// The same on the GPU; each part's tensors are separate device buffers at `offset` floats.
Result run_gpu(CudaContext& cuda, const std::vector<int64_t>& parts, int64_t C, int64_t H, int64_t W,
               const std::vector<float>& x, const std::vector<float>& gamma, const std::vector<float>& beta,
               const std::vector<float>& dy, const std::vector<float>& rm0, const std::vector<float>& rv0,
               const ActivationParams* act, int64_t offset) {
  const ExecContext& ctx = cuda.ctx();
  const int64_t HW = H * W;
  const size_t S = size_t(2 * C + 1);
  DeviceFloats g(gamma), b(beta);
  std::vector<double> zeros(S, 0.0);
  Result r{std::vector<float>(x.size()), {}, {}, {}, {}, std::vector<float>(x.size()), std::vector<float>(C, 0.0f),
           std::vector<float>(C, 0.0f), std::vector<float>(x.size()), zeros, zeros};
  struct Part {
    int64_t N, off;
    DeviceFloats x, dy, y, dx;
  };
  std::vector<Part> ps;
  int64_t at = 0;
  for (int64_t p : parts) {
    const int64_t off = at * C * HW, len = p * C * HW;
    // An empty part still gets a one-float buffer (never read): the kernels see N = 0.
    std::vector<float> xs(x.begin() + off, x.begin() + off + len), dys(dy.begin() + off, dy.begin() + off + len);
    if (len == 0) xs = dys = {0.0f};
    const int64_t alloc = std::max<int64_t>(len, 1);
    ps.push_back(Part{p, off, DeviceFloats(xs, offset), DeviceFloats(dys, offset), DeviceFloats::poisoned(alloc, offset),
                      DeviceFloats::poisoned(alloc, offset)});
    at += p;
  }
  DeviceFloats rm0d(rm0);
  for (Part& p : ps) {
    DeviceDoubles mine(zeros);
    run_op(Backend::cuda, BatchnormForwardStats{&ctx, make_batchnorm_shape(p.N, C, H, W), p.x.data(), rm0d.data(), mine.data()});
    cuda.synchronize();
    std::vector<double> m = mine.get();
    for (size_t i = 0; i < S; ++i) r.stats[i] += m[i];
  }
  DeviceDoubles stats(r.stats);
  std::vector<double> sums(S, 0.0);
  for (Part& p : ps) {
    DeviceFloats rm(rm0), rv(rv0), sm = DeviceFloats::poisoned(C), sis = DeviceFloats::poisoned(C);
    DeviceFloats dg = DeviceFloats::poisoned(C), db = DeviceFloats::poisoned(C);
    DeviceDoubles mine(zeros);
    run_op(Backend::cuda, BatchnormForwardApply{&ctx, make_batchnorm_shape(p.N, C, H, W), stats.data(), p.x.data(), g.data(), b.data(), act,
                                 p.y.data(), rm.data(), rv.data(), sm.data(), sis.data()});
    run_op(Backend::cuda, BatchnormBackwardStats{&ctx, make_batchnorm_shape(p.N, C, H, W), p.x.data(), p.y.data(), act, sm.data(), sis.data(),
                                  p.dy.data(), mine.data(), dg.data(), db.data()});
    cuda.synchronize();
    r.rm = rm.get();
    r.rv = rv.get();
    r.sm = sm.get();
    r.sis = sis.get();
    std::vector<double> m = mine.get();
    for (size_t i = 0; i < S; ++i) sums[i] += m[i];
    std::vector<float> dgh = dg.get(), dbh = db.get();
    for (int64_t c = 0; c < C; ++c) {
      r.dg[size_t(c)] += dgh[size_t(c)];
      r.db[size_t(c)] += dbh[size_t(c)];
    }
    if (p.N > 0) {
      std::vector<float> yh = p.y.get();
      std::copy(yh.begin(), yh.end(), r.y.begin() + p.off);
    }
    r.sums = sums;
  }
  DeviceDoubles sums_d(sums);
  DeviceFloats sm(r.sm), sis(r.sis);
  for (Part& p : ps) {
    run_op(Backend::cuda, BatchnormBackwardApply{&ctx, make_batchnorm_shape(p.N, C, H, W), sums_d.data(), p.x.data(), p.y.data(), act,
                                  g.data(), sm.data(), sis.data(), p.dy.data(), p.dx.data()});
    cuda.synchronize();
    if (p.N > 0) {
      std::vector<float> dxh = p.dx.get();
      std::copy(dxh.begin(), dxh.end(), r.dx.begin() + p.off);
    }
  }
  int64_t N = 0;
  for (int64_t p : parts) N += p;
  DeviceFloats xall(x, offset), yi = DeviceFloats::poisoned(int64_t(x.size()), offset), rv0d(rv0);
  run_op(Backend::cuda, BatchnormForwardInferAct{&ctx, make_batchnorm_shape(N, C, H, W), xall.data(), g.data(), b.data(), rm0d.data(),
                                   rv0d.data(), act, yi.data()});
  cuda.synchronize();
  r.yi = yi.get();
  return r;
}

}  // namespace

TEST_CASE("phased batchnorm cuda matches the cpu over uneven parts with every fused activation", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  struct Case {
    std::vector<int64_t> parts;
    int64_t C, H, W;
    float mean;
  };
  const Case cases[] = {{{4, 0, 3}, 3, 4, 5, 0.0f},  {{2, 2}, 5, 8, 8, 30.0f}, {{1}, 2, 3, 3, 0.0f},
                        {{0, 7}, 70, 1, 1, 0.0f},    {{16, 9}, 8, 16, 16, 5.0f}, {{3, 1, 0}, 4, 7, 9, 0.0f},
                        {{40, 24}, 6, 24, 24, 2.0f}};  // 12 slices a channel: the last block of each finishes it
  const ActivationParams acts[] = {{ActivationKind::relu, 0.0f},
                                   {ActivationKind::leaky_relu, 0.1f},
                                   {ActivationKind::elu, 0.7f},
                                   {ActivationKind::sigmoid, 0.0f},
                                   {ActivationKind::tanh, 0.0f}};
  for (const Case& c : cases) {
    int64_t N = 0;
    for (int64_t p : c.parts) N += p;
    const size_t n = size_t(N * c.C * c.H * c.W), C = size_t(c.C);
    std::vector<float> x = test::random_floats(n, 71 + n, -1.5f, 2.5f);
    for (float& v : x) v += c.mean;
    const std::vector<float> gamma = test::random_floats(C, 72, 0.5f, 1.5f), beta = test::random_floats(C, 73);
    const std::vector<float> dy = test::random_floats(n, 74 + n), rv0 = test::random_floats(C, 76, 0.5f, 2.0f);
    std::vector<float> rm0 = test::random_floats(C, 75);
    for (float& v : rm0) v += c.mean;
    for (int k = -1; k < 5; ++k) {
      const ActivationParams* act = k < 0 ? nullptr : &acts[k];
      for (int64_t offset : {0, 1}) {
        INFO("parts " << c.parts.size() << " N=" << N << " C=" << c.C << " H=" << c.H << " W=" << c.W
                      << " activation " << (act ? to_string(act->kind) : "none") << " pointer offset " << offset);
        const Result want = run_cpu(c.parts, c.C, c.H, c.W, x, gamma, beta, dy, rm0, rv0, act);
        const Result got = run_gpu(cuda, c.parts, c.C, c.H, c.W, x, gamma, beta, dy, rm0, rv0, act, offset);
        CHECK(compare(to_float(got.stats), to_float(want.stats), kGpuVsCpu) == "");
        CHECK(compare(got.y, want.y, kGpuVsCpu) == "");
        CHECK(compare(got.rm, want.rm, kGpuVsCpu) == "");
        CHECK(compare(got.rv, want.rv, kGpuVsCpu) == "");
        CHECK(compare(got.sm, want.sm, kGpuVsCpu) == "");
        CHECK(compare(got.sis, want.sis, kGpuVsCpu) == "");
        CHECK(compare(to_float(got.sums), to_float(want.sums), kGpuVsCpu) == "");
        CHECK(compare(got.dg, want.dg, kGpuVsCpu) == "");
        CHECK(compare(got.db, want.db, kGpuVsCpu) == "");
        CHECK(compare(got.dx, want.dx, kGpuVsCpu) == "");
        CHECK(compare(got.yi, want.yi, kGpuVsCpu) == "");
      }
    }
  }
}
