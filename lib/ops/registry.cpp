// Every implementation of every op entry point, listed explicitly (no static self-registration):
// one table per argument struct, rows {backend, dtype, name, supports, run} (ops/dispatch.h).
// Trap: CUDA and cuDNN rows are wrapped in CNN_CUDA_ROWS, the one #ifdef of lib/ops outside the
// walled files: a build without CUDA has no such rows (and no stand-ins), so asking for them
// throws from the dispatcher. A BF16 row goes next to its f32 sibling in the same table, e.g.
//   CNN_CUDA_ROWS(row(kCuda, dense_forward_cuda), row(kCuda, dense_forward_cuda_bf16, nullptr, DType::bf16))
// The cpu bf16 rows (the emulation) read their operands' dtype, so each is the cpu f16 row too. The
// cuda f16 rows are the bf16 kernels' f16 instantiations (ops/half16.cuh), listed after them.
#include <algorithm>

#include "ops/activation.h"
#include "ops/add.h"
#include "ops/batchnorm.h"
#include "ops/concat.h"
#include "ops/convert.h"
#include "ops/conv2d_algo.h"
#include "ops/dense.h"
#include "ops/dispatch.h"
#include "ops/dropout.h"
#include "ops/pool2d.h"
#include "ops/softmax_cross_entropy.h"

#ifdef CNN_WITH_CUDA
#define CNN_CUDA_ROWS(...) __VA_ARGS__,
#else
#define CNN_CUDA_ROWS(...)
#endif

// The table of one argument struct: its entry point's name for errors, then its rows.
#define CNN_OP_TABLE(Args, op, ...)                  \
  const OpTable<Args>& Args::table() {               \
    static const OpTable<Args> t{op, {__VA_ARGS__}}; \
    return t;                                        \
  }

namespace cnn {

// The implementations the tables list, each defined in its <stem>_<backend> file (the only
// callers are these tables: everything else runs an op through run_op).
void activation_forward_cpu(const ActivationForward& a);
void activation_backward_cpu(const ActivationBackward& a);
void activation_backward_from_output_cpu(const ActivationBackwardFromOutput& a);
void activation_forward_cpu_bf16(const ActivationForward& a);
void activation_backward_cpu_bf16(const ActivationBackward& a);
void activation_backward_from_output_cpu_bf16(const ActivationBackwardFromOutput& a);
void activation_forward_cuda(const ActivationForward& a);
void activation_backward_cuda(const ActivationBackward& a);
void activation_backward_from_output_cuda(const ActivationBackwardFromOutput& a);
void activation_forward_cuda_bf16(const ActivationForward& a);
void activation_forward_cuda_f16(const ActivationForward& a);
void activation_backward_cuda_bf16(const ActivationBackward& a);
void activation_backward_cuda_f16(const ActivationBackward& a);
void activation_backward_from_output_cuda_bf16(const ActivationBackwardFromOutput& a);
void activation_backward_from_output_cuda_f16(const ActivationBackwardFromOutput& a);
void activation_forward_cudnn(const ActivationForward& a);
void bias_activation_forward_cpu(const BiasActivationForward& a);
void bias_activation_forward_cuda(const BiasActivationForward& a);
void activation_backward_cudnn(const ActivationBackward& a);
void add_forward_cpu(const AddForward& a);
void add_backward_cpu(const AddBackward& a);
void add_forward_cpu_bf16(const AddForward& a);
void add_backward_cpu_bf16(const AddBackward& a);
void add_forward_cuda(const AddForward& a);
void add_backward_cuda(const AddBackward& a);
void add_forward_cuda_bf16(const AddForward& a);
void add_forward_cuda_f16(const AddForward& a);
void add_backward_cuda_bf16(const AddBackward& a);
void add_backward_cuda_f16(const AddBackward& a);
void batchnorm_forward_train_cpu(const BatchnormForwardTrain& a);
void batchnorm_forward_infer_cpu(const BatchnormForwardInfer& a);
void batchnorm_backward_cpu(const BatchnormBackward& a);
void batchnorm_forward_train_cuda(const BatchnormForwardTrain& a);
void batchnorm_forward_infer_cuda(const BatchnormForwardInfer& a);
void batchnorm_backward_cuda(const BatchnormBackward& a);
void batchnorm_forward_train_cudnn(const BatchnormForwardTrain& a);
void batchnorm_forward_infer_cudnn(const BatchnormForwardInfer& a);
void batchnorm_backward_cudnn(const BatchnormBackward& a);
void batchnorm_forward_stats_cpu(const BatchnormForwardStats& a);
void batchnorm_forward_apply_cpu(const BatchnormForwardApply& a);
void batchnorm_forward_infer_act_cpu(const BatchnormForwardInferAct& a);
void batchnorm_backward_stats_cpu(const BatchnormBackwardStats& a);
void batchnorm_backward_apply_cpu(const BatchnormBackwardApply& a);
void batchnorm_forward_stats_cuda(const BatchnormForwardStats& a);
void batchnorm_forward_apply_cuda(const BatchnormForwardApply& a);
void batchnorm_forward_infer_act_cuda(const BatchnormForwardInferAct& a);
void batchnorm_backward_stats_cuda(const BatchnormBackwardStats& a);
void batchnorm_backward_apply_cuda(const BatchnormBackwardApply& a);
void batchnorm_forward_train_cpu_bf16(const BatchnormForwardTrain& a);
void batchnorm_forward_infer_cpu_bf16(const BatchnormForwardInfer& a);
void batchnorm_backward_cpu_bf16(const BatchnormBackward& a);
void batchnorm_forward_stats_cpu_bf16(const BatchnormForwardStats& a);
void batchnorm_forward_apply_cpu_bf16(const BatchnormForwardApply& a);
void batchnorm_forward_infer_act_cpu_bf16(const BatchnormForwardInferAct& a);
void batchnorm_backward_stats_cpu_bf16(const BatchnormBackwardStats& a);
void batchnorm_backward_apply_cpu_bf16(const BatchnormBackwardApply& a);
void batchnorm_forward_train_cuda_bf16(const BatchnormForwardTrain& a);
void batchnorm_forward_train_cuda_f16(const BatchnormForwardTrain& a);
void batchnorm_forward_train_cuda_f32cl(const BatchnormForwardTrain& a);
void batchnorm_backward_cuda_bf16(const BatchnormBackward& a);
void batchnorm_backward_cuda_f16(const BatchnormBackward& a);
void batchnorm_backward_cuda_f32cl(const BatchnormBackward& a);
void batchnorm_forward_stats_cuda_bf16(const BatchnormForwardStats& a);
void batchnorm_forward_stats_cuda_f16(const BatchnormForwardStats& a);
void batchnorm_forward_stats_cuda_f32cl(const BatchnormForwardStats& a);
void batchnorm_forward_apply_cuda_bf16(const BatchnormForwardApply& a);
void batchnorm_forward_apply_cuda_f16(const BatchnormForwardApply& a);
void batchnorm_forward_apply_cuda_f32cl(const BatchnormForwardApply& a);
void batchnorm_forward_infer_act_cuda_bf16(const BatchnormForwardInferAct& a);
void batchnorm_forward_infer_act_cuda_f16(const BatchnormForwardInferAct& a);
void batchnorm_forward_infer_act_cuda_f32cl(const BatchnormForwardInferAct& a);
void batchnorm_backward_stats_cuda_bf16(const BatchnormBackwardStats& a);
void batchnorm_backward_stats_cuda_f16(const BatchnormBackwardStats& a);
void batchnorm_backward_stats_cuda_f32cl(const BatchnormBackwardStats& a);
void batchnorm_backward_apply_cuda_bf16(const BatchnormBackwardApply& a);
void batchnorm_backward_apply_cuda_f16(const BatchnormBackwardApply& a);
void batchnorm_backward_apply_cuda_f32cl(const BatchnormBackwardApply& a);
void batchnorm_forward_train_act_cpu(const BatchnormForwardTrainAct& a);
void batchnorm_backward_act_cpu(const BatchnormBackwardAct& a);
void batchnorm_forward_train_act_cuda(const BatchnormForwardTrainAct& a);
void batchnorm_backward_act_cuda(const BatchnormBackwardAct& a);
void batchnorm_forward_train_act_cuda_bf16(const BatchnormForwardTrainAct& a);
void batchnorm_forward_train_act_cuda_f16(const BatchnormForwardTrainAct& a);
void batchnorm_forward_train_act_cuda_f32cl(const BatchnormForwardTrainAct& a);
void batchnorm_backward_act_cuda_bf16(const BatchnormBackwardAct& a);
void batchnorm_backward_act_cuda_f16(const BatchnormBackwardAct& a);
void batchnorm_backward_act_cuda_f32cl(const BatchnormBackwardAct& a);
// The bf16/f16 training rows forced onto one path (batchnorm_nhwc_bf16.cuh): one kernel a
// direction (shapes that fit one co-resident grid: batchnorm_one_kernel_fits) or two.
bool batchnorm_one_kernel_fits(const BatchnormShape& sh);
// The f32 NCHW rows forced onto one path (batchnorm_nchw_one.cuh): shapes with a batch.
bool batchnorm_one_kernel_nchw_fits(const BatchnormShape& sh);
void batchnorm_forward_train_cuda_f32_one(const BatchnormForwardTrain& a);
void batchnorm_forward_train_cuda_f32_two(const BatchnormForwardTrain& a);
void batchnorm_backward_cuda_f32_one(const BatchnormBackward& a);
void batchnorm_backward_cuda_f32_two(const BatchnormBackward& a);
void batchnorm_forward_train_act_cuda_f32_one(const BatchnormForwardTrainAct& a);
void batchnorm_forward_train_act_cuda_f32_two(const BatchnormForwardTrainAct& a);
void batchnorm_backward_act_cuda_f32_one(const BatchnormBackwardAct& a);
void batchnorm_backward_act_cuda_f32_two(const BatchnormBackwardAct& a);
void batchnorm_forward_train_cuda_bf16_one(const BatchnormForwardTrain& a);
void batchnorm_forward_train_cuda_f16_one(const BatchnormForwardTrain& a);
void batchnorm_forward_train_cuda_f32cl_one(const BatchnormForwardTrain& a);
void batchnorm_forward_train_cuda_bf16_two(const BatchnormForwardTrain& a);
void batchnorm_forward_train_cuda_f16_two(const BatchnormForwardTrain& a);
void batchnorm_forward_train_cuda_f32cl_two(const BatchnormForwardTrain& a);
void batchnorm_backward_cuda_bf16_one(const BatchnormBackward& a);
void batchnorm_backward_cuda_f16_one(const BatchnormBackward& a);
void batchnorm_backward_cuda_f32cl_one(const BatchnormBackward& a);
void batchnorm_backward_cuda_bf16_two(const BatchnormBackward& a);
void batchnorm_backward_cuda_f16_two(const BatchnormBackward& a);
void batchnorm_backward_cuda_f32cl_two(const BatchnormBackward& a);
void batchnorm_forward_train_act_cuda_bf16_one(const BatchnormForwardTrainAct& a);
void batchnorm_forward_train_act_cuda_f16_one(const BatchnormForwardTrainAct& a);
void batchnorm_forward_train_act_cuda_f32cl_one(const BatchnormForwardTrainAct& a);
void batchnorm_forward_train_act_cuda_bf16_two(const BatchnormForwardTrainAct& a);
void batchnorm_forward_train_act_cuda_f16_two(const BatchnormForwardTrainAct& a);
void batchnorm_forward_train_act_cuda_f32cl_two(const BatchnormForwardTrainAct& a);
void batchnorm_backward_act_cuda_bf16_one(const BatchnormBackwardAct& a);
void batchnorm_backward_act_cuda_f16_one(const BatchnormBackwardAct& a);
void batchnorm_backward_act_cuda_f32cl_one(const BatchnormBackwardAct& a);
void batchnorm_backward_act_cuda_bf16_two(const BatchnormBackwardAct& a);
void batchnorm_backward_act_cuda_f16_two(const BatchnormBackwardAct& a);
void batchnorm_backward_act_cuda_f32cl_two(const BatchnormBackwardAct& a);
void convert_forward_cpu(const ConvertForward& a);
void convert_forward_cuda(const ConvertForward& a);
void concat_forward_cpu(const ConcatForward& a);
void concat_backward_cpu(const ConcatBackward& a);
void concat_forward_cpu_bf16(const ConcatForward& a);
void concat_backward_cpu_bf16(const ConcatBackward& a);
void concat_forward_cuda(const ConcatForward& a);
void concat_backward_cuda(const ConcatBackward& a);
void concat_forward_cuda_bf16(const ConcatForward& a);
void concat_forward_cuda_f16(const ConcatForward& a);
void concat_forward_cuda_f32cl(const ConcatForward& a);
void concat_backward_cuda_bf16(const ConcatBackward& a);
void concat_backward_cuda_f16(const ConcatBackward& a);
void concat_backward_cuda_f32cl(const ConcatBackward& a);
void dense_forward_cpu(const DenseForward& a);
void dense_backward_cpu(const DenseBackward& a);
void dense_forward_cpu_bf16(const DenseForward& a);
void dense_backward_cpu_bf16(const DenseBackward& a);
void dense_forward_cuda(const DenseForward& a);
void dense_backward_cuda(const DenseBackward& a);
void dense_forward_cuda_bf16(const DenseForward& a);
void dense_forward_cuda_f16(const DenseForward& a);
void dense_backward_cuda_bf16(const DenseBackward& a);
void dense_backward_cuda_f16(const DenseBackward& a);
void dropout_forward_cpu(const DropoutForward& a);
void dropout_backward_cpu(const DropoutBackward& a);
void dropout_forward_cpu_bf16(const DropoutForward& a);
void dropout_backward_cpu_bf16(const DropoutBackward& a);
void dropout_forward_cuda(const DropoutForward& a);
void dropout_backward_cuda(const DropoutBackward& a);
void dropout_forward_cuda_bf16(const DropoutForward& a);
void dropout_forward_cuda_f16(const DropoutForward& a);
void dropout_backward_cuda_bf16(const DropoutBackward& a);
void dropout_backward_cuda_f16(const DropoutBackward& a);
void pool2d_forward_cpu(const Pool2dForward& a);
void pool2d_backward_cpu(const Pool2dBackward& a);
void pool2d_forward_cpu_bf16(const Pool2dForward& a);
void pool2d_backward_cpu_bf16(const Pool2dBackward& a);
void pool2d_forward_cuda(const Pool2dForward& a);
void pool2d_backward_cuda(const Pool2dBackward& a);
void pool2d_forward_cuda_bf16(const Pool2dForward& a);
void pool2d_forward_cuda_f16(const Pool2dForward& a);
void pool2d_forward_cuda_f32cl(const Pool2dForward& a);
void pool2d_backward_cuda_bf16(const Pool2dBackward& a);
void pool2d_backward_cuda_f16(const Pool2dBackward& a);
void pool2d_backward_cuda_f32cl(const Pool2dBackward& a);
void pool2d_forward_cudnn(const Pool2dForward& a);
void pool2d_backward_cudnn(const Pool2dBackward& a);
void softmax_cross_entropy_forward_cpu(const SoftmaxCrossEntropyForward& a);
void softmax_cross_entropy_backward_cpu(const SoftmaxCrossEntropyBackward& a);
void softmax_cross_entropy_forward_cuda(const SoftmaxCrossEntropyForward& a);
void softmax_cross_entropy_backward_cuda(const SoftmaxCrossEntropyBackward& a);
void softmax_cross_entropy_forward_cuda_async(const SoftmaxCrossEntropyForwardAsync& a);
void softmax_cross_entropy_forward_cudnn(const SoftmaxCrossEntropyForward& a);
void softmax_cross_entropy_backward_cudnn(const SoftmaxCrossEntropyBackward& a);

bool backend_built(Backend b) {
#ifdef CNN_WITH_CUDA
  return true;
#else
  return b == Backend::cpu;
#endif
}

namespace {

constexpr Backend kCpu = Backend::cpu, kCuda = Backend::cuda, kCudnn = Backend::cudnn;

template <typename T>
struct Same {
  using type = T;
};

// The default row of backend b for `run` (named after the backend).
template <typename Args>
OpImpl<Args> row(Backend b, void (*run)(const Args&), typename Same<bool (*)(const Args&)>::type supports = nullptr,
                 DType dtype = DType::f32) {
  return {b, dtype, to_string(b), supports, run};
}

// A named strategy row of backend b ("<backend>:<strategy>", run only when asked for by name).
template <typename Args>
OpImpl<Args> named_row(Backend b, const char* name, void (*run)(const Args&),
                       typename Same<bool (*)(const Args&)>::type supports, DType dtype) {
  return {b, dtype, name, supports, run};
}

// cuDNN's shape rules, as supports functions of the rows.
constexpr auto activation_on_cudnn = [](const auto& a) { return activation_cudnn_supports(a.p); };
constexpr auto pool2d_on_cudnn = [](const auto& a) { return pool2d_cudnn_supports(a.sh); };
constexpr auto batchnorm_on_cudnn = [](const auto& a) { return batchnorm_cudnn_supports(a.sh); };
// The forward ones take no mean offset (batchnorm.h's "Mean offset": cuDNN has no such operand).
constexpr auto batchnorm_forward_on_cudnn = [](const auto& a) {
  return a.mean_offset == nullptr && batchnorm_cudnn_supports(a.sh);
};
constexpr auto batchnorm_one_kernel = [](const auto& a) { return batchnorm_one_kernel_fits(a.sh); };
constexpr auto batchnorm_one_kernel_nchw = [](const auto& a) { return batchnorm_one_kernel_nchw_fits(a.sh); };
// The rows of a batchnorm training entry point forced onto one path (stem_cuda_<dtype>_one, _two),
// every dtype: "cuda:one_kernel" on the shapes it takes, "cuda:two_kernels" on every shape.
#define CNN_BATCHNORM_PATH_ROWS(stem)                                                                    \
  named_row(kCuda, "cuda:one_kernel", stem##_cuda_bf16_one, batchnorm_one_kernel, DType::bf16),          \
      named_row(kCuda, "cuda:one_kernel", stem##_cuda_f16_one, batchnorm_one_kernel, DType::f16),        \
      named_row(kCuda, "cuda:two_kernels", stem##_cuda_bf16_two, nullptr, DType::bf16),                  \
      named_row(kCuda, "cuda:two_kernels", stem##_cuda_f16_two, nullptr, DType::f16),                    \
      named_row(kCuda, "cuda:one_kernel", stem##_cuda_f32cl_one, batchnorm_one_kernel, DType::f32cl),    \
      named_row(kCuda, "cuda:two_kernels", stem##_cuda_f32cl_two, nullptr, DType::f32cl),                \
      named_row(kCuda, "cuda:one_kernel", stem##_cuda_f32_one, batchnorm_one_kernel_nchw, DType::f32),   \
      named_row(kCuda, "cuda:two_kernels", stem##_cuda_f32_two, nullptr, DType::f32)
constexpr auto softmax_on_cudnn = [](const auto& a) { return softmax_cross_entropy_cudnn_supports(a.sh); };

}  // namespace

CNN_OP_TABLE(ActivationForward, "activation forward", row(kCpu, activation_forward_cpu),
             row(kCpu, activation_forward_cpu_bf16, nullptr, DType::bf16),
             row(kCpu, activation_forward_cpu_bf16, nullptr, DType::f16),
             row(kCpu, activation_forward_cpu, nullptr, DType::f32cl),
             CNN_CUDA_ROWS(row(kCuda, activation_forward_cuda),
                           row(kCuda, activation_forward_cuda_bf16, nullptr, DType::bf16),
                           row(kCuda, activation_forward_cuda_f16, nullptr, DType::f16),
                           row(kCuda, activation_forward_cuda, nullptr, DType::f32cl),
                           row(kCudnn, activation_forward_cudnn, activation_on_cudnn)))
CNN_OP_TABLE(ActivationBackward, "activation backward", row(kCpu, activation_backward_cpu),
             row(kCpu, activation_backward_cpu_bf16, nullptr, DType::bf16),
             row(kCpu, activation_backward_cpu_bf16, nullptr, DType::f16),
             row(kCpu, activation_backward_cpu, nullptr, DType::f32cl),
             CNN_CUDA_ROWS(row(kCuda, activation_backward_cuda),
                           row(kCuda, activation_backward_cuda_bf16, nullptr, DType::bf16),
                           row(kCuda, activation_backward_cuda_f16, nullptr, DType::f16),
                           row(kCuda, activation_backward_cuda, nullptr, DType::f32cl),
                           row(kCudnn, activation_backward_cudnn, activation_on_cudnn)))
CNN_OP_TABLE(BiasActivationForward, "bias and activation forward", row(kCpu, bias_activation_forward_cpu),
             CNN_CUDA_ROWS(row(kCuda, bias_activation_forward_cuda)))
CNN_OP_TABLE(ActivationBackwardFromOutput, "activation backward_from_output",
             row(kCpu, activation_backward_from_output_cpu),
             row(kCpu, activation_backward_from_output_cpu_bf16, nullptr, DType::bf16),
             row(kCpu, activation_backward_from_output_cpu_bf16, nullptr, DType::f16),
             row(kCpu, activation_backward_from_output_cpu, nullptr, DType::f32cl),
             CNN_CUDA_ROWS(row(kCuda, activation_backward_from_output_cuda),
                           row(kCuda, activation_backward_from_output_cuda_bf16, nullptr, DType::bf16),
                           row(kCuda, activation_backward_from_output_cuda_f16, nullptr, DType::f16),
                           row(kCuda, activation_backward_from_output_cuda, nullptr, DType::f32cl)))

CNN_OP_TABLE(DenseForward, "dense forward", row(kCpu, dense_forward_cpu),
             row(kCpu, dense_forward_cpu_bf16, nullptr, DType::bf16),
             row(kCpu, dense_forward_cpu_bf16, nullptr, DType::f16),
             row(kCpu, dense_forward_cpu, nullptr, DType::f32cl),
             CNN_CUDA_ROWS(row(kCuda, dense_forward_cuda), row(kCuda, dense_forward_cuda_bf16, nullptr, DType::bf16),
                           row(kCuda, dense_forward_cuda_f16, nullptr, DType::f16),
                           row(kCuda, dense_forward_cuda, nullptr, DType::f32cl)))
CNN_OP_TABLE(DenseBackward, "dense backward", row(kCpu, dense_backward_cpu),
             row(kCpu, dense_backward_cpu_bf16, nullptr, DType::bf16),
             row(kCpu, dense_backward_cpu_bf16, nullptr, DType::f16),
             row(kCpu, dense_backward_cpu, nullptr, DType::f32cl),
             CNN_CUDA_ROWS(row(kCuda, dense_backward_cuda), row(kCuda, dense_backward_cuda_bf16, nullptr, DType::bf16),
                           row(kCuda, dense_backward_cuda_f16, nullptr, DType::f16),
                           row(kCuda, dense_backward_cuda, nullptr, DType::f32cl)))

CNN_OP_TABLE(Pool2dForward, "pool2d forward", row(kCpu, pool2d_forward_cpu),
             row(kCpu, pool2d_forward_cpu_bf16, nullptr, DType::bf16),
             row(kCpu, pool2d_forward_cpu_bf16, nullptr, DType::f16),
             row(kCpu, pool2d_forward_cpu_bf16, nullptr, DType::f32cl),
             CNN_CUDA_ROWS(row(kCuda, pool2d_forward_cuda), row(kCuda, pool2d_forward_cuda_bf16, nullptr, DType::bf16),
                           row(kCuda, pool2d_forward_cuda_f16, nullptr, DType::f16),
                           row(kCuda, pool2d_forward_cuda_f32cl, nullptr, DType::f32cl),
                           row(kCudnn, pool2d_forward_cudnn, pool2d_on_cudnn)))
CNN_OP_TABLE(Pool2dBackward, "pool2d backward", row(kCpu, pool2d_backward_cpu),
             row(kCpu, pool2d_backward_cpu_bf16, nullptr, DType::bf16),
             row(kCpu, pool2d_backward_cpu_bf16, nullptr, DType::f16),
             row(kCpu, pool2d_backward_cpu_bf16, nullptr, DType::f32cl),
             CNN_CUDA_ROWS(row(kCuda, pool2d_backward_cuda),
                           row(kCuda, pool2d_backward_cuda_bf16, nullptr, DType::bf16),
                           row(kCuda, pool2d_backward_cuda_f16, nullptr, DType::f16),
                           row(kCuda, pool2d_backward_cuda_f32cl, nullptr, DType::f32cl),
                           row(kCudnn, pool2d_backward_cudnn, pool2d_on_cudnn)))

CNN_OP_TABLE(AddForward, "add forward", row(kCpu, add_forward_cpu),
             row(kCpu, add_forward_cpu_bf16, nullptr, DType::bf16),
             row(kCpu, add_forward_cpu_bf16, nullptr, DType::f16), row(kCpu, add_forward_cpu, nullptr, DType::f32cl),
             CNN_CUDA_ROWS(row(kCuda, add_forward_cuda), row(kCuda, add_forward_cuda_bf16, nullptr, DType::bf16),
                           row(kCuda, add_forward_cuda_f16, nullptr, DType::f16),
                           row(kCuda, add_forward_cuda, nullptr, DType::f32cl)))
CNN_OP_TABLE(AddBackward, "add backward", row(kCpu, add_backward_cpu),
             row(kCpu, add_backward_cpu_bf16, nullptr, DType::bf16),
             row(kCpu, add_backward_cpu_bf16, nullptr, DType::f16), row(kCpu, add_backward_cpu, nullptr, DType::f32cl),
             CNN_CUDA_ROWS(row(kCuda, add_backward_cuda), row(kCuda, add_backward_cuda_bf16, nullptr, DType::bf16),
                           row(kCuda, add_backward_cuda_f16, nullptr, DType::f16),
                           row(kCuda, add_backward_cuda, nullptr, DType::f32cl)))
CNN_OP_TABLE(ConvertForward, "convert", row(kCpu, convert_forward_cpu),
             row(kCpu, convert_forward_cpu, nullptr, DType::bf16), row(kCpu, convert_forward_cpu, nullptr, DType::f16),
             row(kCpu, convert_forward_cpu, nullptr, DType::f32cl),
             CNN_CUDA_ROWS(row(kCuda, convert_forward_cuda), row(kCuda, convert_forward_cuda, nullptr, DType::bf16),
                           row(kCuda, convert_forward_cuda, nullptr, DType::f16),
                           row(kCuda, convert_forward_cuda, nullptr, DType::f32cl)))
CNN_OP_TABLE(ConcatForward, "concat forward", row(kCpu, concat_forward_cpu),
             row(kCpu, concat_forward_cpu_bf16, nullptr, DType::bf16),
             row(kCpu, concat_forward_cpu_bf16, nullptr, DType::f16),
             row(kCpu, concat_forward_cpu_bf16, nullptr, DType::f32cl),
             CNN_CUDA_ROWS(row(kCuda, concat_forward_cuda), row(kCuda, concat_forward_cuda_bf16, nullptr, DType::bf16),
                           row(kCuda, concat_forward_cuda_f16, nullptr, DType::f16),
                           row(kCuda, concat_forward_cuda_f32cl, nullptr, DType::f32cl)))
CNN_OP_TABLE(ConcatBackward, "concat backward", row(kCpu, concat_backward_cpu),
             row(kCpu, concat_backward_cpu_bf16, nullptr, DType::bf16),
             row(kCpu, concat_backward_cpu_bf16, nullptr, DType::f16),
             row(kCpu, concat_backward_cpu_bf16, nullptr, DType::f32cl),
             CNN_CUDA_ROWS(row(kCuda, concat_backward_cuda),
                           row(kCuda, concat_backward_cuda_bf16, nullptr, DType::bf16),
                           row(kCuda, concat_backward_cuda_f16, nullptr, DType::f16),
                           row(kCuda, concat_backward_cuda_f32cl, nullptr, DType::f32cl)))
CNN_OP_TABLE(DropoutForward, "dropout forward", row(kCpu, dropout_forward_cpu),
             row(kCpu, dropout_forward_cpu_bf16, nullptr, DType::bf16),
             row(kCpu, dropout_forward_cpu_bf16, nullptr, DType::f16),
             row(kCpu, dropout_forward_cpu, nullptr, DType::f32cl),
             CNN_CUDA_ROWS(row(kCuda, dropout_forward_cuda),
                           row(kCuda, dropout_forward_cuda_bf16, nullptr, DType::bf16),
                           row(kCuda, dropout_forward_cuda_f16, nullptr, DType::f16),
                           row(kCuda, dropout_forward_cuda, nullptr, DType::f32cl)))
CNN_OP_TABLE(DropoutBackward, "dropout backward", row(kCpu, dropout_backward_cpu),
             row(kCpu, dropout_backward_cpu_bf16, nullptr, DType::bf16),
             row(kCpu, dropout_backward_cpu_bf16, nullptr, DType::f16),
             row(kCpu, dropout_backward_cpu, nullptr, DType::f32cl),
             CNN_CUDA_ROWS(row(kCuda, dropout_backward_cuda),
                           row(kCuda, dropout_backward_cuda_bf16, nullptr, DType::bf16),
                           row(kCuda, dropout_backward_cuda_f16, nullptr, DType::f16),
                           row(kCuda, dropout_backward_cuda, nullptr, DType::f32cl)))

// batchnorm: no cuDNN bf16 or f16 rows (such a layer runs cuda); batchnorm_forward_infer_cuda serves every
// dtype (it runs the forward_infer_act row of its operands' dtype).
CNN_OP_TABLE(BatchnormForwardTrain, "batchnorm forward_train", row(kCpu, batchnorm_forward_train_cpu),
             row(kCpu, batchnorm_forward_train_cpu_bf16, nullptr, DType::bf16),
             row(kCpu, batchnorm_forward_train_cpu_bf16, nullptr, DType::f16),
             row(kCpu, batchnorm_forward_train_cpu_bf16, nullptr, DType::f32cl),
             CNN_CUDA_ROWS(row(kCuda, batchnorm_forward_train_cuda),
                           row(kCuda, batchnorm_forward_train_cuda_bf16, nullptr, DType::bf16),
                           row(kCuda, batchnorm_forward_train_cuda_f16, nullptr, DType::f16),
                           row(kCuda, batchnorm_forward_train_cuda_f32cl, nullptr, DType::f32cl),
                           CNN_BATCHNORM_PATH_ROWS(batchnorm_forward_train),
                           row(kCudnn, batchnorm_forward_train_cudnn, batchnorm_forward_on_cudnn)))
CNN_OP_TABLE(BatchnormForwardInfer, "batchnorm forward_infer", row(kCpu, batchnorm_forward_infer_cpu),
             row(kCpu, batchnorm_forward_infer_cpu_bf16, nullptr, DType::bf16),
             row(kCpu, batchnorm_forward_infer_cpu_bf16, nullptr, DType::f16),
             row(kCpu, batchnorm_forward_infer_cpu_bf16, nullptr, DType::f32cl),
             CNN_CUDA_ROWS(row(kCuda, batchnorm_forward_infer_cuda),
                           row(kCuda, batchnorm_forward_infer_cuda, nullptr, DType::bf16),
                           row(kCuda, batchnorm_forward_infer_cuda, nullptr, DType::f16),
                           row(kCuda, batchnorm_forward_infer_cuda, nullptr, DType::f32cl),
                           row(kCudnn, batchnorm_forward_infer_cudnn, batchnorm_forward_on_cudnn)))
CNN_OP_TABLE(BatchnormBackward, "batchnorm backward", row(kCpu, batchnorm_backward_cpu),
             row(kCpu, batchnorm_backward_cpu_bf16, nullptr, DType::bf16),
             row(kCpu, batchnorm_backward_cpu_bf16, nullptr, DType::f16),
             row(kCpu, batchnorm_backward_cpu_bf16, nullptr, DType::f32cl),
             CNN_CUDA_ROWS(row(kCuda, batchnorm_backward_cuda),
                           row(kCuda, batchnorm_backward_cuda_bf16, nullptr, DType::bf16),
                           row(kCuda, batchnorm_backward_cuda_f16, nullptr, DType::f16),
                           row(kCuda, batchnorm_backward_cuda_f32cl, nullptr, DType::f32cl),
                           CNN_BATCHNORM_PATH_ROWS(batchnorm_backward),
                           row(kCudnn, batchnorm_backward_cudnn, batchnorm_on_cudnn)))
CNN_OP_TABLE(BatchnormForwardStats, "batchnorm forward_stats", row(kCpu, batchnorm_forward_stats_cpu),
             row(kCpu, batchnorm_forward_stats_cpu_bf16, nullptr, DType::bf16),
             row(kCpu, batchnorm_forward_stats_cpu_bf16, nullptr, DType::f16),
             row(kCpu, batchnorm_forward_stats_cpu_bf16, nullptr, DType::f32cl),
             CNN_CUDA_ROWS(row(kCuda, batchnorm_forward_stats_cuda),
                           row(kCuda, batchnorm_forward_stats_cuda_bf16, nullptr, DType::bf16),
                           row(kCuda, batchnorm_forward_stats_cuda_f16, nullptr, DType::f16),
                           row(kCuda, batchnorm_forward_stats_cuda_f32cl, nullptr, DType::f32cl)))
CNN_OP_TABLE(BatchnormForwardApply, "batchnorm forward_apply", row(kCpu, batchnorm_forward_apply_cpu),
             row(kCpu, batchnorm_forward_apply_cpu_bf16, nullptr, DType::bf16),
             row(kCpu, batchnorm_forward_apply_cpu_bf16, nullptr, DType::f16),
             row(kCpu, batchnorm_forward_apply_cpu_bf16, nullptr, DType::f32cl),
             CNN_CUDA_ROWS(row(kCuda, batchnorm_forward_apply_cuda),
                           row(kCuda, batchnorm_forward_apply_cuda_bf16, nullptr, DType::bf16),
                           row(kCuda, batchnorm_forward_apply_cuda_f16, nullptr, DType::f16),
                           row(kCuda, batchnorm_forward_apply_cuda_f32cl, nullptr, DType::f32cl)))
CNN_OP_TABLE(BatchnormForwardInferAct, "batchnorm forward_infer_act", row(kCpu, batchnorm_forward_infer_act_cpu),
             row(kCpu, batchnorm_forward_infer_act_cpu_bf16, nullptr, DType::bf16),
             row(kCpu, batchnorm_forward_infer_act_cpu_bf16, nullptr, DType::f16),
             row(kCpu, batchnorm_forward_infer_act_cpu_bf16, nullptr, DType::f32cl),
             CNN_CUDA_ROWS(row(kCuda, batchnorm_forward_infer_act_cuda),
                           row(kCuda, batchnorm_forward_infer_act_cuda_bf16, nullptr, DType::bf16),
                           row(kCuda, batchnorm_forward_infer_act_cuda_f16, nullptr, DType::f16),
                           row(kCuda, batchnorm_forward_infer_act_cuda_f32cl, nullptr, DType::f32cl)))
CNN_OP_TABLE(BatchnormBackwardStats, "batchnorm backward_stats", row(kCpu, batchnorm_backward_stats_cpu),
             row(kCpu, batchnorm_backward_stats_cpu_bf16, nullptr, DType::bf16),
             row(kCpu, batchnorm_backward_stats_cpu_bf16, nullptr, DType::f16),
             row(kCpu, batchnorm_backward_stats_cpu_bf16, nullptr, DType::f32cl),
             CNN_CUDA_ROWS(row(kCuda, batchnorm_backward_stats_cuda),
                           row(kCuda, batchnorm_backward_stats_cuda_bf16, nullptr, DType::bf16),
                           row(kCuda, batchnorm_backward_stats_cuda_f16, nullptr, DType::f16),
                           row(kCuda, batchnorm_backward_stats_cuda_f32cl, nullptr, DType::f32cl)))
CNN_OP_TABLE(BatchnormBackwardApply, "batchnorm backward_apply", row(kCpu, batchnorm_backward_apply_cpu),
             row(kCpu, batchnorm_backward_apply_cpu_bf16, nullptr, DType::bf16),
             row(kCpu, batchnorm_backward_apply_cpu_bf16, nullptr, DType::f16),
             row(kCpu, batchnorm_backward_apply_cpu_bf16, nullptr, DType::f32cl),
             CNN_CUDA_ROWS(row(kCuda, batchnorm_backward_apply_cuda),
                           row(kCuda, batchnorm_backward_apply_cuda_bf16, nullptr, DType::bf16),
                           row(kCuda, batchnorm_backward_apply_cuda_f16, nullptr, DType::f16),
                           row(kCuda, batchnorm_backward_apply_cuda_f32cl, nullptr, DType::f32cl)))
// The one-rank phased pairs: one cpu function serves every dtype (it runs the phases' rows).
CNN_OP_TABLE(BatchnormForwardTrainAct, "batchnorm forward_train_act", row(kCpu, batchnorm_forward_train_act_cpu),
             row(kCpu, batchnorm_forward_train_act_cpu, nullptr, DType::bf16),
             row(kCpu, batchnorm_forward_train_act_cpu, nullptr, DType::f16),
             row(kCpu, batchnorm_forward_train_act_cpu, nullptr, DType::f32cl),
             CNN_CUDA_ROWS(row(kCuda, batchnorm_forward_train_act_cuda),
                           row(kCuda, batchnorm_forward_train_act_cuda_bf16, nullptr, DType::bf16),
                           row(kCuda, batchnorm_forward_train_act_cuda_f16, nullptr, DType::f16),
                           row(kCuda, batchnorm_forward_train_act_cuda_f32cl, nullptr, DType::f32cl),
                           CNN_BATCHNORM_PATH_ROWS(batchnorm_forward_train_act)))
CNN_OP_TABLE(BatchnormBackwardAct, "batchnorm backward_act", row(kCpu, batchnorm_backward_act_cpu),
             row(kCpu, batchnorm_backward_act_cpu, nullptr, DType::bf16),
             row(kCpu, batchnorm_backward_act_cpu, nullptr, DType::f16),
             row(kCpu, batchnorm_backward_act_cpu, nullptr, DType::f32cl),
             CNN_CUDA_ROWS(row(kCuda, batchnorm_backward_act_cuda),
                           row(kCuda, batchnorm_backward_act_cuda_bf16, nullptr, DType::bf16),
                           row(kCuda, batchnorm_backward_act_cuda_f16, nullptr, DType::f16),
                           row(kCuda, batchnorm_backward_act_cuda_f32cl, nullptr, DType::f32cl),
                           CNN_BATCHNORM_PATH_ROWS(batchnorm_backward_act)))

CNN_OP_TABLE(SoftmaxCrossEntropyForward, "softmax_cross_entropy forward", row(kCpu, softmax_cross_entropy_forward_cpu),
             CNN_CUDA_ROWS(row(kCuda, softmax_cross_entropy_forward_cuda),
                           row(kCudnn, softmax_cross_entropy_forward_cudnn, softmax_on_cudnn)))
CNN_OP_TABLE(SoftmaxCrossEntropyBackward, "softmax_cross_entropy backward",
             row(kCpu, softmax_cross_entropy_backward_cpu),
             CNN_CUDA_ROWS(row(kCuda, softmax_cross_entropy_backward_cuda),
                           row(kCudnn, softmax_cross_entropy_backward_cudnn, softmax_on_cudnn)))
CNN_OP_TABLE(SoftmaxCrossEntropyForwardAsync, "softmax_cross_entropy forward_async",
             CNN_CUDA_ROWS(row(kCuda, softmax_cross_entropy_forward_cuda_async)))

// conv2d: the rows of one direction from the algorithm providers, named algorithms first (the
// list conv2d_algos reads), then the backends' default rows.
static ImplTable<ConvAlgo> conv2d_rows(ConvDir dir, const char* op) {
  ImplTable<ConvAlgo> t{op, {}};
  for (auto provider : {conv2d_cpu_algos, CNN_CUDA_ROWS(conv2d_cuda_algos, conv2d_cudnn_algos)}) {
    for (ConvAlgo& a : provider()) {
      if (a.dir != dir) continue;
      CNN_CHECK(!find_impl(t, a.backend, a.dtype, a.name), "{}: '{}' ({}) is listed twice", op, a.name,
                to_string(a.dtype));
      CNN_CHECK(a.can_implement_fn && a.workspace_fn && a.run, "{}: '{}' lacks a function", op, a.name);
      t.rows.push_back(std::move(a));
    }
  }
  std::stable_partition(t.rows.begin(), t.rows.end(),
                        [](const ConvAlgo& a) { return a.name.find(':') != std::string::npos; });
  return t;
}

const ImplTable<ConvAlgo>& Conv2dForward::table() {
  static const ImplTable<ConvAlgo> t = conv2d_rows(ConvDir::forward, "conv2d forward");
  return t;
}
const ImplTable<ConvAlgo>& Conv2dBackwardData::table() {
  static const ImplTable<ConvAlgo> t = conv2d_rows(ConvDir::backward_data, "conv2d backward_data");
  return t;
}
const ImplTable<ConvAlgo>& Conv2dBackwardFilter::table() {
  static const ImplTable<ConvAlgo> t = conv2d_rows(ConvDir::backward_filter, "conv2d backward_filter");
  return t;
}

}  // namespace cnn
