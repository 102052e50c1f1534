// One batchnorm training forward and one inference forward with a mean offset (ops/batchnorm.h
// "Mean offset"), on any backend and dtype, for the offset tests (test_batchnorm_offset*.cpp):
// the plain entry points, the one-rank pair with a fused relu, or the two phases one after the
// other. Activations go in and come out as f32 NCHW host vectors (16-bit ones converted on the
// device they live on), so runs of different dtypes and devices compare directly.
// Trap: the inference uses the running statistics the training forward left (as a trainer does).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ops/batchnorm.h"
#include "ops/convert.h"
#include "support/test_util.h"

namespace cnn::test {

enum class BnMode { plain, fused_relu, phased };

inline const char* to_string(BnMode m) {
  return m == BnMode::plain ? "plain" : m == BnMode::fused_relu ? "fused relu" : "phased";
}

struct BnOffsetInputs {
  std::vector<float> x;  // (N, C, H, W)
  std::vector<float> gamma, beta, running_mean, running_var, offset;  // (C); offset empty: none
};

struct BnOffsetOutputs {
  std::vector<float> y, running_mean, running_var, save_mean, save_inv_std, y_infer;
};

// Generated inputs of sh: x in [-1.5, 2.5) made exact in `exact` (so runs of that dtype and of f32
// read the same values), gamma in [0.5, 1.5), running means and offsets in [-3, 3).
inline BnOffsetInputs bn_offset_inputs(const BatchnormShape& sh, uint64_t seed, DType exact = DType::f32) {
  const size_t n = size_t(sh.N * sh.C * sh.H * sh.W), C = size_t(sh.C);
  BnOffsetInputs in;
  in.x = random_floats(n, seed, -1.5f, 2.5f);
  for (float& v : in.x) v = round_to(exact, v);
  in.gamma = random_floats(C, seed + 1, 0.5f, 1.5f);
  in.beta = random_floats(C, seed + 2);
  in.running_mean = random_floats(C, seed + 3, -3.0f, 3.0f);
  in.running_var = random_floats(C, seed + 4, 0.5f, 2.0f);
  in.offset = random_floats(C, seed + 5, -3.0f, 3.0f);
  return in;
}

inline Tensor bn_floats_on(Device d, const std::vector<float>& v) {
  Tensor t = Tensor::empty(Shape{int64_t(v.size())}, d, "batchnorm offset test operand");
  t.copy_from(Tensor::from_vector(Shape{int64_t(v.size())}, v));
  return t;
}

// row: "" for the backend's default, else a named row ("cuda:one_kernel", "cuda:two_kernels").
// synchronize (a GPU's stream) runs before the outputs are read.
inline BnOffsetOutputs run_bn_with_offset(const ExecContext& ctx, Backend b, DType dtype, const BatchnormShape& sh,
                                          const BnOffsetInputs& in, BnMode mode, const std::string& row = "",
                                          const std::function<void()>& synchronize = {}) {
  const Device dev = ctx.device;
  const ActDims dims{sh.N, sh.C, sh.H, sh.W};
  const Shape act{sh.N, sh.C, sh.H, sh.W};
  const Layout layout = dtype == DType::f32 ? Layout::nchw : Layout::nhwc;
  Tensor x32 = bn_floats_on(dev, in.x);
  Tensor x = Tensor::empty(act, dev, "x", dtype), y = Tensor::empty(act, dev, "y", dtype),
         yi = Tensor::empty(act, dev, "y_infer", dtype);
  run_op(b, ConvertForward{&ctx, dims, x32.view(), Layout::nchw, x.view(), layout});
  Tensor gamma = bn_floats_on(dev, in.gamma), beta = bn_floats_on(dev, in.beta);
  Tensor rm = bn_floats_on(dev, in.running_mean), rv = bn_floats_on(dev, in.running_var);
  Tensor sm = Tensor::zeros(Shape{sh.C}, dev), sis = Tensor::zeros(Shape{sh.C}, dev);
  Tensor stats = Tensor::zeros(Shape{2 * (2 * sh.C + 1)}, dev);  // (2C + 1) doubles
  Tensor off = in.offset.empty() ? Tensor() : bn_floats_on(dev, in.offset);
  const float* o = in.offset.empty() ? nullptr : off.data();
  double* st = reinterpret_cast<double*>(stats.data());
  const ActivationParams relu{ActivationKind::relu, 0.0f};
  const ActivationParams* a = mode == BnMode::fused_relu ? &relu : nullptr;
  if (mode == BnMode::plain) {
    run_op(b, BatchnormForwardTrain{&ctx, sh, x.view(), gamma.data(), beta.data(), y.view(), rm.data(), rv.data(),
                                    sm.data(), sis.data(), o},
           row);
    run_op(b, BatchnormForwardInfer{&ctx, sh, x.view(), gamma.data(), beta.data(), rm.data(), rv.data(), yi.view(), o});
  } else {
    if (mode == BnMode::fused_relu) {
      run_op(b, BatchnormForwardTrainAct{&ctx, sh, x.view(), gamma.data(), beta.data(), a, y.view(), rm.data(),
                                         rv.data(), sm.data(), sis.data(), st, o},
             row);
    } else {
      run_op(b, BatchnormForwardStats{&ctx, sh, x.view(), rm.data(), st, o});
      run_op(b, BatchnormForwardApply{&ctx, sh, st, x.view(), gamma.data(), beta.data(), nullptr, y.view(), rm.data(),
                                      rv.data(), sm.data(), sis.data(), o});
    }
    run_op(b, BatchnormForwardInferAct{&ctx, sh, x.view(), gamma.data(), beta.data(), rm.data(), rv.data(), a,
                                       yi.view(), o});
  }
  Tensor y32 = Tensor::empty(act, dev, "f32 y"), yi32 = Tensor::empty(act, dev, "f32 y_infer");
  run_op(b, ConvertForward{&ctx, dims, y.view(), layout, y32.view(), Layout::nchw});
  run_op(b, ConvertForward{&ctx, dims, yi.view(), layout, yi32.view(), Layout::nchw});
  if (synchronize) synchronize();
  return BnOffsetOutputs{y32.to_vector(), rm.to_vector(), rv.to_vector(), sm.to_vector(), sis.to_vector(),
                         yi32.to_vector()};
}

}  // namespace cnn::test
