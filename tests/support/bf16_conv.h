// BF16 operands of one convolution for the GPU tests of the BF16 kernels (include only from
// *_cuda.cpp tests): bf16 buffers on the device, and a reference in double computed on exactly
// the bf16-rounded inputs, so what remains is the kernels' FP32 summation and output rounding.
// Trap: poison() fills bf16 0xffff and float NaN, so an element a kernel forgets to write fails.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "core/bf16.h"
#include "core/cuda_check.h"
#include "core/device.h"
#include "core/exec_context.h"
#include "ops/conv2d.h"
#include "ops/conv2d_weights_bf16.h"
#include "support/catch.h"
#include "support/device_floats.h"
#include "support/nhwc.h"
#include "support/test_util.h"
#include "support/tolerance.h"

namespace cnn::test {

// A device buffer of n bf16 `offset` elements into its allocation (1 breaks 16-byte alignment).
class DeviceBf16 {
 public:
  DeviceBf16(const std::vector<bf16>& v, int64_t offset = 0)
      : m_n(int64_t(v.size())),
        m_offset(offset),
        m_mem(device_malloc(Device::cuda, size_t(m_n + offset) * 2 + 16, "test bf16"),
              [](void* p) { device_free(Device::cuda, p); }) {
    set(v);
  }
  void set(const std::vector<bf16>& v) {
    device_memcpy(data(), Device::cuda, v.data(), Device::cpu, v.size() * 2);
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  void poison() { set(std::vector<bf16>(size_t(m_n), bf16{0xffff})); }
  bf16* data() { return static_cast<bf16*>(m_mem.get()) + m_offset; }
  std::vector<float> get() const {
    std::vector<bf16> v(static_cast<size_t>(m_n));
    device_memcpy(v.data(), Device::cpu, static_cast<bf16*>(m_mem.get()) + m_offset, Device::cuda, v.size() * 2);
    std::vector<float> f(v.size());
    for (size_t i = 0; i < v.size(); ++i) f[i] = to_float(v[i]);
    return f;
  }

 private:
  int64_t m_n, m_offset;
  std::shared_ptr<void> m_mem;
};

inline std::vector<bf16> to_bf16_vector(const std::vector<float>& v) {
  std::vector<bf16> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = to_bf16(v[i]);
  return b;
}
inline std::vector<float> widen(const std::vector<bf16>& v) {
  std::vector<float> f(v.size());
  for (size_t i = 0; i < v.size(); ++i) f[i] = to_float(v[i]);
  return f;
}

// Operands rounded to bf16 (bias stays FP32 unless bias_bf16: rounded too, as cuDNN's bf16 rows
// use it) and the double reference on those values.
struct Bf16Reference {
  Conv2dShape sh;
  std::vector<bf16> x, w, dy;
  std::vector<float> b, y, dx, dw, db;
  Bf16Reference(const Conv2dShape& shape, uint64_t seed, bool bias_bf16 = false)
      : sh(shape),
        x(to_bf16_vector(test::random_floats(sh.N * sh.C * sh.H * sh.W, seed))),
        w(to_bf16_vector(test::random_floats(sh.weight_numel(), seed + 1))),
        dy(to_bf16_vector(test::random_floats(sh.N * sh.K * sh.P * sh.Q, seed + 2))),
        b(test::random_floats(sh.K, seed + 3)) {
    if (bias_bf16) b = widen(to_bf16_vector(b));
    const ExecContext cpu = ExecContext::cpu();
    auto dbl = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
    const std::vector<double> xd = dbl(widen(x)), wd = dbl(widen(w)), dyd = dbl(widen(dy)), bd = dbl(b);
    std::vector<double> yd(dy.size()), dxd(x.size()), dwd(w.size()), dbd(b.size());
    conv2d_forward_reference<double>(cpu, sh, xd.data(), wd.data(), sh.has_bias ? bd.data() : nullptr, yd.data());
    conv2d_backward_reference<double>(cpu, sh, xd.data(), wd.data(), dyd.data(), dxd.data(), dwd.data(), dbd.data());
    y.assign(yd.begin(), yd.end());
    dx.assign(dxd.begin(), dxd.end());
    dw.assign(dwd.begin(), dwd.end());
    db.assign(dbd.begin(), dbd.end());
  }
};

struct Bf16ConvOperands {
  DeviceBf16 x, w, dy, y, dx;
  DeviceFloats b, dw, db;
  Bf16ConvOperands(const Bf16Reference& r, int64_t offset)
      : x(r.x, offset),
        w(r.w, offset),
        dy(r.dy, offset),
        y(std::vector<bf16>(r.y.size()), offset),
        dx(std::vector<bf16>(r.dx.size()), offset),
        b(r.b, offset),
        dw(std::vector<float>(r.dw.size()), offset),
        db(std::vector<float>(r.db.size()), offset) {}
  void poison() {
    y.poison();
    dx.poison();
    dw.poison();
    db.poison();
  }
};

// The same operands channels-last for the NHWC kernels: x, dy and the references y, dx permuted to
// NHWC; the weights packed (on the CPU) in `layouts`' order from the bf16-rounded master, so the
// packing's rounding is exact; dw (K, C/groups, R, S) and db as in NCHW.
struct Bf16NhwcOperands {
  std::vector<float> y_ref, dx_ref;
  DeviceBf16 x, dy, y, dx;
  std::vector<DeviceBf16> w;
  DeviceFloats b, dw, db;
  Bf16NhwcOperands(const Bf16Reference& r, int64_t offset, const std::vector<Bf16WeightLayout>& layouts)
      : y_ref(nchw_to_nhwc(r.y, r.sh.N, r.sh.K, r.sh.P, r.sh.Q)),
        dx_ref(nchw_to_nhwc(r.dx, r.sh.N, r.sh.C, r.sh.H, r.sh.W)),
        x(nchw_to_nhwc(r.x, r.sh.N, r.sh.C, r.sh.H, r.sh.W), offset),
        dy(nchw_to_nhwc(r.dy, r.sh.N, r.sh.K, r.sh.P, r.sh.Q), offset),
        y(std::vector<bf16>(r.y.size()), offset),
        dx(std::vector<bf16>(r.dx.size()), offset),
        b(r.b, offset),
        dw(std::vector<float>(r.dw.size()), offset),
        db(std::vector<float>(r.db.size()), offset) {
    const std::vector<float> master = widen(r.w);
    for (Bf16WeightLayout layout : layouts) {
      std::vector<bf16> packed(master.size());
      conv2d_pack_weights_bf16_cpu(ExecContext::cpu(1), r.sh, layout, master.data(), packed.data());
      w.emplace_back(packed, offset);
    }
  }
  void poison() {
    y.poison();
    dx.poison();
    dw.poison();
    db.poison();
  }
};

// One run's four outputs on the host: y and dx widened from bf16, dw and db.
struct Bf16ConvOutputs {
  std::vector<float> y, dx, dw, db;
};
template <class Operands>
Bf16ConvOutputs outputs_of(const Operands& d) {
  return {d.y.get(), d.dx.get(), d.dw.get(), d.db.get()};
}
// What r says the NCHW kernels give.
inline Bf16ConvOutputs reference_of(const Bf16Reference& r) { return {r.y, r.dx, r.dw, r.db}; }
// What r says the NHWC kernels give (y, dx permuted; dw, db as in NCHW).
inline Bf16ConvOutputs reference_of(const Bf16Reference& r, const Bf16NhwcOperands& d) {
  return {d.y_ref, d.dx_ref, r.dw, r.db};
}

// Checks got against want: y and dx within `out` (defaults to one bf16 rounding of the output),
// dw and db within `grad` (FP32 results).
inline void check_outputs(const Bf16ConvOutputs& got, const Bf16ConvOutputs& want, Tolerance out = kBf16OutputVsCpu,
                          Tolerance grad = kGpuVsCpu) {
  CHECK(compare(got.y, want.y, out) == "");
  CHECK(compare(got.dx, want.dx, out) == "");
  CHECK(compare(got.dw, want.dw, grad) == "");
  CHECK(compare(got.db, want.db, grad) == "");
}

}  // namespace cnn::test
