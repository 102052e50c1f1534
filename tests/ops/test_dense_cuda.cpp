// Dense CUDA (cuBLAS SGEMM, bias fill, column-sum db) against the float CPU reference: shapes with
// N, C, K of 1 and odd sizes (the column-major transposes show up there), each gradient alone,
// misaligned pointers, bitwise repeats.
// Trap: outputs are poisoned with NaN before every run, so an unwritten element fails.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "core/tensor.h"
#include "ops/dense.h"
#include "support/catch.h"
#include "support/device_floats.h"
#include "support/test_util.h"
#include "support/tolerance.h"

using namespace cnn;
using cnn::test::compare;
using cnn::test::kGpuVsCpu;

namespace {

using cnn::test::DeviceFloats;

std::string dense_name(const DenseShape& sh) {
  return fmt::format("dense N={} C={} K={} {}", sh.N, sh.C, sh.K, sh.has_bias ? "bias" : "no bias");
}

struct Reference {
  DenseShape sh;
  std::vector<float> x, w, b, dy, y, dx, dw, db;
  Reference(const DenseShape& shape, uint64_t seed)
      : sh(shape),
        x(test::random_floats(sh.N * sh.C, seed)),
        w(test::random_floats(sh.K * sh.C, seed + 1)),
        b(test::random_floats(sh.K, seed + 2)),
        dy(test::random_floats(sh.N * sh.K, seed + 3)),
        y(sh.N * sh.K),
        dx(x.size()),
        dw(w.size()),
        db(b.size()) {
    const ExecContext cpu = ExecContext::cpu(1);
    dense_forward_reference<float>(cpu, sh, x.data(), w.data(), b.data(), y.data());
    dense_backward_reference<float>(cpu, sh, x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data());
  }
};

struct DeviceDense {
  DeviceFloats x, w, b, dy, y, dx, dw, db;
  DeviceDense(const Reference& r, int64_t offset = 0)
      : x(r.x, offset), w(r.w, offset), b(r.b, offset), dy(r.dy, offset), y(r.y, offset), dx(r.dx, offset),
        dw(r.dw, offset), db(r.db, offset) {}
};

bool untouched(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(), [](float f) { return std::isnan(f); });
}

// Forward plus the selected gradients; what was not asked for must stay NaN.
void run_and_check(CudaContext& cuda, const Reference& r, DeviceDense& d, bool want_dx, bool want_dw, bool want_db) {
  for (DeviceFloats* p : {&d.y, &d.dx, &d.dw, &d.db}) p->poison();
  dense_forward_cuda({&cuda.ctx(), r.sh, d.x.data(), d.w.data(), r.sh.has_bias ? d.b.data() : nullptr, d.y.data()});
  dense_backward_cuda({&cuda.ctx(), r.sh, d.x.data(), d.w.data(), d.dy.data(), want_dx ? d.dx.data() : nullptr,
                      want_dw ? d.dw.data() : nullptr, want_db ? d.db.data() : nullptr});
  cuda.synchronize();
  CHECK(compare(d.y.get(), r.y, kGpuVsCpu) == "");
  if (want_dx) CHECK(compare(d.dx.get(), r.dx, kGpuVsCpu) == "");
  else CHECK(untouched(d.dx.get()));
  if (want_dw) CHECK(compare(d.dw.get(), r.dw, kGpuVsCpu) == "");
  else CHECK(untouched(d.dw.get()));
  if (want_db) CHECK(compare(d.db.get(), r.db, kGpuVsCpu) == "");
  else CHECK(untouched(d.db.get()));
}

std::vector<DenseShape> shapes() {
  std::vector<DenseShape> all;
  for (int64_t N : {1, 3, 64})
    for (int64_t C : {1, 5, 128, 301})
      for (int64_t K : {1, 7, 64})
        for (bool bias : {true, false}) all.push_back(DenseShape{N, C, K, bias});
  return all;
}

}  // namespace

TEST_CASE("dense cuda matches the cpu reference over generated shapes", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  for (const DenseShape& sh : shapes()) {
    INFO(dense_name(sh));
    const Reference r(sh, 31);
    DeviceDense d(r);
    run_and_check(cuda, r, d, true, true, true);
  }
  for (const DenseShape& sh : {DenseShape{256, 2304, 512, true}, DenseShape{37, 1000, 130, false}}) {
    INFO(dense_name(sh));
    const Reference r(sh, 32);
    DeviceDense d(r);
    run_and_check(cuda, r, d, true, true, true);
  }
}

TEST_CASE("dense cuda backward computes any single gradient alone", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  for (const DenseShape& sh : {DenseShape{3, 5, 7, true}, DenseShape{64, 128, 10, false}}) {
    INFO(dense_name(sh));
    const Reference r(sh, 41);
    DeviceDense d(r);
    run_and_check(cuda, r, d, true, false, false);
    run_and_check(cuda, r, d, false, true, false);
    run_and_check(cuda, r, d, false, false, true);
    run_and_check(cuda, r, d, false, false, false);
  }
}

TEST_CASE("dense cuda works on pointers that are not 16-byte aligned", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const DenseShape sh{9, 33, 17, true};
  const Reference r(sh, 51);
  DeviceDense d(r, 1);
  run_and_check(cuda, r, d, true, true, true);
}

TEST_CASE("dense cuda repeats bit for bit", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const DenseShape sh{128, 1024, 256, true};
  const Reference r(sh, 61);
  std::vector<float> first[4];
  for (int run = 0; run < 2; ++run) {
    DeviceDense d(r);
    dense_forward_cuda({&cuda.ctx(), sh, d.x.data(), d.w.data(), d.b.data(), d.y.data()});
    dense_backward_cuda({&cuda.ctx(), sh, d.x.data(), d.w.data(), d.dy.data(), d.dx.data(), d.dw.data(), d.db.data()});
    cuda.synchronize();
    const std::vector<float> got[4] = {d.y.get(), d.dx.get(), d.dw.get(), d.db.get()};
    for (int i = 0; i < 4; ++i) {
      if (run == 0) first[i] = got[i];
      else CHECK(compare(got[i], first[i], test::kExact) == "");
    }
  }
}
