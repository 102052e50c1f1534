// How far a convolution algorithm's output is from a trusted one: the autotuner's accuracy guard
// and the rel_err column of `cnn-bench conv` both use this, on the same kind of operands.
// Two operand sets; an algorithm's error is the worse of the two.
//  0, zero-mean: x ~ N(0,1), w ~ N(0, 2/fan_in) (He), b ~ N(0,1), dy ~ N(0,1).
//  1, as in a network trained with batchnorm: x = max(0, N(0,1)) (a ReLU's output), the same w and
//     b, and dy as a following batchnorm's backward hands it down: per output channel, N(0,1)
//     values made zero-mean and orthogonal to the normalised conv output of this x (the
//     projection batchnorm's backward applies), scaled by 2^-17 (~8e-6, the size of real
//     gradients a few layers below the loss).
// Set 1 makes dw a small difference of large sums (dw is orthogonal to w per channel) and its
// inputs small and non-negative, as in training.
// Values: N(0,1) draws of probe_operands.h (counter-based; seeds 4s..4s+3 for x, w, b and dy); the
// contract is the sets' distributions above, not particular numbers, so a decision cached under
// "probe 2" stays valid across generators. Where they live: an f32 probe on a GPU makes x on the
// device and compares y and dx there with references kept there; dy (set 1 is projected on the
// host), w, b and the 16-bit probes' activations are made on the host and uploaded.
// Dtype: a bf16 (or f16) probe holds x and dy rounded to bf16 (f16) values, uploaded twice:
// channels-last for the candidates (the bf16 or f16 rows) and f32 NCHW for the reference, which runs in plain FP32 on
// exactly the values the candidates read (w and b stay the FP32 masters, which bf16 rows round
// themselves): what is measured is the candidate's own rounding (weights, outputs) and summation.
// An f16 probe scales set 1's dy by 2^-1 instead of 2^-17: an fp16 run's gradients carry its loss
// scale (2^16 by default), which lifts them out of f16's subnormal range. Trap: the probe is not a proof. In a fer_cnn step
// cuDNN's winograd_nonfused filter gradient of conv3b was 2.5e-3 from float64 (PyTorch 5e-6),
// while both sets measured it near 5e-6; that algorithm is excluded by a rule measured on the
// real step (conv2d_cudnn.cpp), not by this probe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/exec_context.h"
#include "core/tensor.h"
#include "ops/conv2d_algo.h"
#include "tune/accuracy_tolerance.h"
#include "tune/probe_operands.h"

namespace cnn {

// The largest relative L2 difference from the reference an algorithm may have to count as
// accurate is kConvAccuracyTolerance (tune/accuracy_tolerance.h, with its reason; autotuner:
// --autotune-tolerance / train.autotune.tolerance).

// The operands' values (probe_normals) and relative_l2 are in probe_operands.h.

// Name of the reference of direction d for `shape` on ctx's device ("cpu:reference_fp64" on the
// CPU); nullopt when none can run it.
std::optional<std::string> conv_reference_name(const ExecContext& ctx, const Conv2dShape& shape, ConvDir d);

class ConvProbe {
public:
  // dtype: of the candidates' activations (f32, bf16 or f16); the algorithms run on it must be of it.
  ConvProbe(const ExecContext& ctx, const Conv2dShape& shape, uint64_t seed = 1, DType dtype = DType::f32);
  const Conv2dShape& shape() const { return m_sh; }
  DType dtype() const { return m_dtype; }
  // The math the candidates are allowed (ConvOperands::math of operands()); the reference always
  // runs in plain FP32. Default fp32.
  void set_math(MathMode m) { m_math = m; }
  MathMode math() const { return m_math; }
  // The operands of direction d for the candidates (activations in dtype()): inputs and this
  // probe's output buffers (db only with a bias).
  ConvOperands operands(ConvDir d);
  // Fills d's outputs with NaN.
  void poison(ConvDir d);
  // Host copy of d's outputs, NCHW floats (bf16 ones widened): y; dx; dw followed by db when the
  // shape has a bias.
  std::vector<float> output(ConvDir d) const;
  std::optional<std::string> reference_name(ConvDir d) const { return conv_reference_name(m_ctx, m_sh, d); }
  // Relative L2 of d's current outputs from the reference (computed once per direction, on this
  // probe's inputs; throws when there is no reference).
  double output_error(ConvDir d);
  // Poisons, runs `a` on each operand set and returns the largest output_error. operands() is
  // set 0 again afterwards.
  double run_and_compare(const ConvAlgo& a);
  // After `a` ran on operands() of set 0 (e.g. timed runs): output_error of that result, then `a`
  // once on each other set; the largest error.
  double worst_error(const ConvAlgo& a);
  // The operand set operands() and output_error() use (see the top of this file).
  void use_input_set(int set);
  static constexpr int kInputSets = 2;

private:
  // The activations of every set in one dtype (f32 NCHW, or bf16 channels-last).
  struct Activations {
    Tensor xs[kInputSets], dys[kInputSets], y, dx;
  };
  // x from m_hxs, or made on the device from x_seed when those are empty (device_inputs()).
  Activations make_activations(DType t, uint64_t x_seed) const;
  // x made on the device: an f32 probe on a GPU (no host copy of x is needed there).
  bool device_inputs() const { return m_ctx.device == Device::cuda && m_dtype == DType::f32; }
  bool device_compare(ConvDir d) const;
  const Tensor& reference_tensor(ConvDir d);  // device_compare(d): the reference output on the device
  ConvOperands operands_of(Activations& a, ConvDir d);
  void poison_of(Activations& a, ConvDir d);
  std::vector<float> output_of(const Activations& a, ConvDir d) const;
  Tensor upload(const std::vector<float>& v, const Shape& shape, DType t) const;  // v NCHW
  const std::vector<float>& reference(ConvDir d);
  double errors_on_sets(const ConvAlgo& a, int first, int last);
  void ensure_dy(ConvDir d);  // set 1's dy exists before direction d (a backward one) reads it
  void make_projected_dy();    // set 1's dy, from the reference forward of set 1
  const ExecContext& m_ctx;
  Conv2dShape m_sh;
  DType m_dtype = DType::f32;
  Activations m_ref_act;   // f32: what the reference reads and writes
  Activations m_cand_act;  // the candidates' (shares m_ref_act's tensors under f32)
  Tensor m_w, m_b, m_dw, m_db;
  // Host copies of the inputs: x only on the CPU (its float64 reference reads them), dy of set 0
  // (set 1's is made from it), set 1's dy on the CPU.
  std::vector<float> m_hxs[kInputSets], m_hw, m_hb, m_hdys[kInputSets];
  bool m_dy1_made = false;
  int m_set = 0;
  MathMode m_math = MathMode::fp32;
  std::optional<std::vector<float>> m_ref[kInputSets][3];  // host copies of the reference outputs
  std::optional<Tensor> m_ref_dev[kInputSets][3];          // device ones (device_compare)
};

}  // namespace cnn
