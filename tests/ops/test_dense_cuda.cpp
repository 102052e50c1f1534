// Dense CUDA (cuBLAS SGEMM, bias fill, column-sum db) beyond what the harness compares with the
// reference (test_backend_ops.cpp): bitwise repeats.
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

}  // namespace

TEST_CASE("dense cuda repeats bit for bit", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const DenseShape sh{128, 1024, 256, true};
  const Reference r(sh, 61);
  std::vector<float> first[4];
  for (int run = 0; run < 2; ++run) {
    DeviceDense d(r);
    run_op(Backend::cuda, DenseForward{&cuda.ctx(), sh, d.x.data(), d.w.data(), d.b.data(), d.y.data()});
    run_op(Backend::cuda, DenseBackward{&cuda.ctx(), sh, d.x.data(), d.w.data(), d.dy.data(), d.dx.data(), d.dw.data(), d.db.data()});
    cuda.synchronize();
    const std::vector<float> got[4] = {d.y.get(), d.dx.get(), d.dw.get(), d.db.get()};
    for (int i = 0; i < 4; ++i) {
      if (run == 0) first[i] = got[i];
      else CHECK(compare(got[i], first[i], test::kExact) == "");
    }
  }
}
