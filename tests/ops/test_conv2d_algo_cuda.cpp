// Every GPU algorithm of the registry (our CUDA strategies and each cuDNN algorithm) in every
// direction against the double CPU reference on generated shapes; outputs are poisoned with NaN
// first and the outputs of other directions must stay untouched.
// Trap: FFT and Winograd transforms round differently from a direct sum, so they get a looser
// (still small) tolerance; everything else uses kGpuVsCpu.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "core/cuda_context.h"
#include "ops/conv2d_algo.h"
#include "support/catch.h"
#include "support/device_floats.h"
#include "support/test_util.h"
#include "support/tolerance.h"

using namespace cnn;
using cnn::test::DeviceFloats;

namespace {

std::vector<Conv2dShape> algo_shapes() {
  return {
      Conv2dShape::make(2, 8, 12, 12, 16, 3, 3, 1, 1, 1, 1),                    // 3x3 same (winograd, fft)
      Conv2dShape::make(1, 5, 9, 11, 7, 3, 3, 1, 1, 0, 0, 1, 1, 1, false),     // N=1, odd, no bias
      Conv2dShape::make(3, 6, 10, 9, 4, 5, 5, 1, 1, 2, 2),                     // 5x5
      Conv2dShape::make(2, 16, 7, 7, 32, 1, 1),                                // pointwise
      Conv2dShape::make(2, 4, 13, 11, 6, 3, 3, 2, 2, 1, 1),                    // strided
      Conv2dShape::make(2, 4, 11, 11, 6, 3, 3, 1, 1, 2, 2, 2, 2),              // dilated
      Conv2dShape::make(2, 8, 9, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, 2),             // grouped
      Conv2dShape::make(2, 8, 9, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, 8),             // depthwise
      Conv2dShape::make(4, 1, 20, 20, 8, 5, 5, 1, 1, 0, 0),                    // C == 1 first layer
      Conv2dShape::make(8, 32, 16, 16, 64, 3, 3, 1, 1, 1, 1),                  // enough for split reductions
  };
}

test::Tolerance tolerance_for(const std::string& name) {
  if (name.find("fft") != std::string::npos || name.find("winograd") != std::string::npos)
    return test::Tolerance{1e-3, 1e-3};
  return test::kGpuVsCpu;
}

struct Reference {
  std::vector<float> x, w, b, dy, y, dx, dw, db;
  explicit Reference(const Conv2dShape& sh, uint64_t seed)
      : x(test::random_floats(size_t(sh.N * sh.C * sh.H * sh.W), seed)),
        w(test::random_floats(size_t(sh.weight_numel()), seed + 1)),
        b(test::random_floats(size_t(sh.K), seed + 2)),
        dy(test::random_floats(size_t(sh.N * sh.K * sh.P * sh.Q), seed + 3)) {
    const ExecContext cpu = ExecContext::cpu(1);
    auto d = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
    std::vector<double> xd = d(x), wd = d(w), bd = d(b), dyd = d(dy), yd(dy.size()), dxd(x.size()), dwd(w.size()),
                        dbd(b.size());
    conv2d_forward_reference<double>(cpu, sh, xd.data(), wd.data(), sh.has_bias ? bd.data() : nullptr, yd.data());
    conv2d_backward_reference<double>(cpu, sh, xd.data(), wd.data(), dyd.data(), dxd.data(), dwd.data(), dbd.data());
    auto f = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
    y = f(yd), dx = f(dxd), dw = f(dwd), db = f(dbd);
  }
};

bool all_nan(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(), [](float f) { return std::isnan(f); });
}

}  // namespace

TEST_CASE("every registered gpu conv2d algorithm matches the cpu reference in every direction", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda(0);
  const ExecContext& ctx = cuda.ctx();
  std::map<std::string, int> exercised;  // "name dir" -> shapes run
  const std::vector<Conv2dShape> shapes = algo_shapes();
  for (size_t si = 0; si < shapes.size(); ++si) {
    const Conv2dShape& sh = shapes[si];
    const Reference r(sh, 100 + si);
    DeviceFloats x(r.x), w(r.w), b(r.b), dy(r.dy);
    for (ConvDir dir : {ConvDir::forward, ConvDir::backward_data, ConvDir::backward_filter}) {
      for (const ConvAlgo& a : conv2d_algos(dir)) {
        if (a.backend == Backend::cpu) continue;
        const std::string what = a.name + " " + to_string(dir);
        exercised.emplace(what, 0);
        if (!a.can_implement(ctx, sh) || a.workspace_bytes(ctx, sh) > ctx.workspace_limit_bytes) continue;
        INFO(what << " on " << sh.to_string());
        DeviceFloats y = DeviceFloats::poisoned(int64_t(r.y.size())), dx = DeviceFloats::poisoned(int64_t(r.x.size())),
                     dw = DeviceFloats::poisoned(int64_t(r.w.size())), db = DeviceFloats::poisoned(sh.K);
        ConvOperands op{x.data(), w.data(), sh.has_bias ? b.data() : nullptr, y.data(), dy.data(), dx.data(),
                        dw.data(), sh.has_bias ? db.data() : nullptr};
        a.run(ctx, sh, op);
        cuda.synchronize();
        const test::Tolerance tol = tolerance_for(a.name);
        if (dir == ConvDir::forward) CHECK(test::compare(y.get(), r.y, tol) == "");
        else CHECK(all_nan(y.get()));
        if (dir == ConvDir::backward_data) CHECK(test::compare(dx.get(), r.dx, tol) == "");
        else CHECK(all_nan(dx.get()));
        if (dir == ConvDir::backward_filter) {
          CHECK(test::compare(dw.get(), r.dw, tol) == "");
          if (sh.has_bias) CHECK(test::compare(db.get(), r.db, tol) == "");
        } else {
          CHECK(all_nan(dw.get()));
          CHECK(all_nan(db.get()));
        }
        ++exercised[what];
      }
    }
  }
  // One of our entries that can implement none of these shapes is either broken or needs a shape
  // here. cuDNN decides per shape and version which of its algorithms it accepts (9.14 with FMA
  // math never took cudnn:direct forward, cudnn:winograd forward/backward_data or
  // cudnn:fft_tiling backward_filter on these), so those are listed in a warning, and instead at
  // least 4 cuDNN algorithms per direction must have run, so the cuDNN part cannot pass vacuously.
  std::map<std::string, int> cudnn_ran;  // direction -> cuDNN algorithms that ran somewhere
  std::vector<std::string> cudnn_idle;
  for (const auto& [what, runs] : exercised) {
    const std::string dir = what.substr(what.find(' ') + 1);
    if (what.rfind("cudnn:", 0) == 0) {
      cudnn_ran.emplace(dir, 0);
      if (runs > 0) ++cudnn_ran[dir];
      else cudnn_idle.push_back(what);
      continue;
    }
    INFO(what << " ran on no generated shape");
    CHECK(runs > 0);
  }
  if (!cudnn_idle.empty()) {
    std::string list;
    for (const std::string& w : cudnn_idle) list += (list.empty() ? "" : ", ") + w;
    WARN("cuDNN accepted none of the generated shapes for: " << list);
  }
  if (!cudnn_ran.empty()) {  // a build with cuDNN
    for (ConvDir dir : {ConvDir::forward, ConvDir::backward_data, ConvDir::backward_filter}) {
      INFO("cuDNN algorithms that ran for " << to_string(dir));
      CHECK(cudnn_ran[to_string(dir)] >= 4);
    }
  }
}
