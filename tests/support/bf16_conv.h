// BF16 (or F16) operands of one convolution for the GPU tests of the 16-bit kernels (include only
// from *_cuda.cpp tests): 16-bit buffers on the device, and a reference in double computed on
// exactly the rounded inputs, so what remains is the kernels' FP32 summation and output rounding.
// The classes are templates on the element type T (bf16 or f16); the Bf16 names are T = bf16.
// Trap: poison() fills 0xffff (a NaN in both types) and float NaN, so an element a kernel forgets
// to write fails.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "core/bf16.h"
#include "core/fp16.h"
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

// T's rounding, widening and output tolerance (one rounding of an output).
inline bf16 round_as(float f, const bf16*) { return to_bf16(f); }
inline f16 round_as(float f, const f16*) { return to_f16(f); }
inline Tolerance output_tolerance(const bf16*) { return kBf16OutputVsCpu; }
inline Tolerance output_tolerance(const f16*) { return kF16OutputVsCpu; }
template <typename T>
Tolerance output_tolerance() {
  return output_tolerance(static_cast<const T*>(nullptr));
}

// A device buffer of n T `offset` elements into its allocation (1 breaks 16-byte alignment).
template <typename T>
class Device16 {
 public:
  Device16(const std::vector<T>& v, int64_t offset = 0)
      : m_n(int64_t(v.size())),
        m_offset(offset),
        m_mem(device_malloc(Device::cuda, size_t(m_n + offset) * 2 + 16, "test 16-bit"),
              [](void* p) { device_free(Device::cuda, p); }) {
    set(v);
  }
  void set(const std::vector<T>& v) {
    device_memcpy(data(), Device::cuda, v.data(), Device::cpu, v.size() * 2);
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  void poison() { set(std::vector<T>(size_t(m_n), T{0xffff})); }
  T* data() { return static_cast<T*>(m_mem.get()) + m_offset; }
  std::vector<float> get() const {
    std::vector<T> v(static_cast<size_t>(m_n));
    device_memcpy(v.data(), Device::cpu, static_cast<T*>(m_mem.get()) + m_offset, Device::cuda, v.size() * 2);
    std::vector<float> f(v.size());
    for (size_t i = 0; i < v.size(); ++i) f[i] = to_float(v[i]);
    return f;
  }

 private:
  int64_t m_n, m_offset;
  std::shared_ptr<void> m_mem;
};

using DeviceBf16 = Device16<bf16>;

template <typename T = bf16>
std::vector<T> rounded_vector(const std::vector<float>& v) {
  std::vector<T> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = round_as(v[i], static_cast<const T*>(nullptr));
  return b;
}
inline std::vector<bf16> to_bf16_vector(const std::vector<float>& v) { return rounded_vector<bf16>(v); }
template <typename T>
std::vector<float> widen(const std::vector<T>& v) {
  std::vector<float> f(v.size());
  for (size_t i = 0; i < v.size(); ++i) f[i] = to_float(v[i]);
  return f;
}

// Operands rounded to T (bias stays FP32 unless bias_16: rounded too, as cuDNN's 16-bit rows use
// it) and the double reference on those values.
template <typename T>
struct Reference16 {
  Conv2dShape sh;
  std::vector<T> x, w, dy;
  std::vector<float> b, y, dx, dw, db;
  Reference16(const Conv2dShape& shape, uint64_t seed, bool bias_16 = false)
      : sh(shape),
        x(rounded_vector<T>(test::random_floats(sh.N * sh.C * sh.H * sh.W, seed))),
        w(rounded_vector<T>(test::random_floats(sh.weight_numel(), seed + 1))),
        dy(rounded_vector<T>(test::random_floats(sh.N * sh.K * sh.P * sh.Q, seed + 2))),
        b(test::random_floats(sh.K, seed + 3)) {
    if (bias_16) b = widen(rounded_vector<T>(b));
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
using Bf16Reference = Reference16<bf16>;

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

// The T copy of the T-valued master `w` (K, C/groups, R, S) in `layout`, packed on the CPU through
// the packing's index map (exact: the values are T already).
template <typename T>
std::vector<T> packed_on_cpu(const Conv2dShape& sh, Bf16WeightLayout layout, const std::vector<T>& w) {
  const WeightsBf16Dims d{int(sh.K), int(sh.C / sh.groups), int(sh.R), int(sh.S)};
  std::vector<T> out(w.size());
  for (size_t o = 0; o < w.size(); ++o) out[o] = w[size_t(conv2d_weights_bf16_index(layout, d, int(o)))];
  return out;
}

// The same operands channels-last for the NHWC kernels: x, dy and the references y, dx permuted to
// NHWC; the weights packed (on the CPU) in `layouts`' order from the T-rounded master, so the
// packing's rounding is exact; dw (K, C/groups, R, S) and db as in NCHW.
template <typename T>
struct NhwcOperands16 {
  std::vector<float> y_ref, dx_ref;
  Device16<T> x, dy, y, dx;
  std::vector<Device16<T>> w;
  DeviceFloats b, dw, db;
  NhwcOperands16(const Reference16<T>& r, int64_t offset, const std::vector<Bf16WeightLayout>& layouts)
      : y_ref(nchw_to_nhwc(r.y, r.sh.N, r.sh.K, r.sh.P, r.sh.Q)),
        dx_ref(nchw_to_nhwc(r.dx, r.sh.N, r.sh.C, r.sh.H, r.sh.W)),
        x(nchw_to_nhwc(r.x, r.sh.N, r.sh.C, r.sh.H, r.sh.W), offset),
        dy(nchw_to_nhwc(r.dy, r.sh.N, r.sh.K, r.sh.P, r.sh.Q), offset),
        y(std::vector<T>(r.y.size()), offset),
        dx(std::vector<T>(r.dx.size()), offset),
        b(r.b, offset),
        dw(std::vector<float>(r.dw.size()), offset),
        db(std::vector<float>(r.db.size()), offset) {
    for (Bf16WeightLayout layout : layouts) w.emplace_back(packed_on_cpu(r.sh, layout, r.w), offset);
  }
  void poison() {
    y.poison();
    dx.poison();
    dw.poison();
    db.poison();
  }
};
using Bf16NhwcOperands = NhwcOperands16<bf16>;

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
template <typename T>
Bf16ConvOutputs reference_of(const Reference16<T>& r, const NhwcOperands16<T>& d) {
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
