// The Layer interface: a layer owns its attributes (read from its validated map, LayerSpec::attrs:
// the layer registry holds each type's key declarations and the config checks them), infers
// its output shape, declares its parameters, and runs forward/backward on one backend.
// Parameter memory is not owned by layers: the graph binds views into its flat buffers.
// Trap: shapes given to infer_shape are per sample (no batch dim); tensors at run time have N first.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/model_spec.h"
#include "core/exec_context.h"
#include "core/tensor.h"
#include "ops/activation.h"
#include "ops/packed_weights.h"
#include "core/dtype.h"
#include "core/math_mode.h"
#include "ops/backend.h"
#include "layers/init.h"

namespace cnn {

struct ParamInfo {
  std::string name;      // suffix: "weight", "bias", "running_mean", ...
  Shape shape;           // PyTorch layout
  InitSpec init;
  bool trainable = true; // false: a buffer (no gradient, not optimised)
  bool decay = true;     // weight decay applies
};

// Per-call state shared by all layers of one forward/backward.
struct RunContext {
  const ExecContext* exec = nullptr;
  bool training = true;
  uint64_t seed = 0;   // run seed (dropout)
  uint64_t step = 0;   // global step (dropout offsets)
  // CUDA graphs: (2) run seed and step in GPU memory, read by the kernels instead of the two above.
  const uint64_t* device_seed_step = nullptr;
  // The weight copies bound by Layer::bind_weight_packs hold this step's weights (the executor
  // packed them at the start of this training forward): layers pass them to their ops. Else the
  // ops pack their own per call.
  bool weights_packed = false;
};

// A 16-bit weight copy a layer's ops read (ops/packed_weights.h), which the executor packs once a
// training step for every layer (graph/weight_packs.h) instead of each op call packing its own.
struct WeightPackRequest {
  int use = 0;             // the layer's own tag (conv2d: the ConvDir that reads it; dense: 0)
  int param = 0;           // which of the layer's params() it copies (0: the weight)
  WeightsBf16Dims dims{};  // of that parameter: (K, C/groups, R, S), dense (K, C, 1, 1)
  PackedWeights16 copy;    // dtype and layout; data null until bound
};

// Sums a few doubles over the ranks of a data-parallel run, in place (sync batchnorm's
// per-channel sums), ordered before the next kernel on the run's stream. Every rank must call it
// the same number of times in the same order; the trainer implements it with its communicator.
class StatsReducer {
public:
  virtual ~StatsReducer() = default;
  virtual void sum(double* data, int64_t n, Device where) = 0;
};

class ConvPlanned;  // layers/conv_plan.h

class Layer {
public:
  explicit Layer(const LayerSpec& spec);
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  const std::string& name() const { return m_name; }
  const std::string& type() const { return m_type; }
  const Location& where() const { return m_where; }
  int index() const { return m_index; }
  // The layer's validated map (LayerSpec::attrs, defaults filled in): what an exporter reads.
  const Value& attrs() const { return m_attrs; }

  // Per-sample input shapes -> per-sample output shape. Throws ConfigError at the layer's
  // location when the inputs don't fit ("layer 'conv2': input has 3 channels, ...").
  virtual Shape infer_shape(const std::vector<Shape>& inputs) = 0;
  // Valid after infer_shape.
  virtual std::vector<ParamInfo> params() const { return {}; }
  virtual double forward_flops() const { return 0.0; }   // per sample
  virtual double backward_flops() const { return 2.0 * forward_flops(); }  // per sample
  // What backward reads, so the planner keeps it alive.
  virtual bool backward_needs_inputs() const { return true; }
  virtual bool backward_needs_output() const { return false; }
  // Layers without gradient for their input (none so far) could say so.
  virtual int min_inputs() const { return 1; }
  virtual int max_inputs() const { return 1; }

  // Non-throwing: can this layer run on `b` for its inferred shapes and dtype()? Layers ask the
  // tables of their ops (op_supports, ops/dispatch.h). Default: f32 only, on cpu, and cuda when built.
  virtual bool supports(Backend b) const;
  // The layer's precision (its `precision:` key, else train.precision) and the dtype of its
  // activations, which its op calls pass on through the tensors' views. The graph sets the dtype
  // (Graph::choose_backends): storage_dtype(precision()), or f32cl for tf32 under a channels-last
  // train.tf32_layout, where an implementation of the layer supports it on the device, else f32
  // (reported, with casts planned around the layer).
  Precision precision() const { return m_precision; }
  DType dtype() const { return m_dtype; }
  // Layers with state sized by dtype override it and call the base.
  virtual void set_dtype(DType t) { m_dtype = t; }
  // Non-throwing: whether a backend the layer may use on `device` supports it at its dtype (its
  // own `backend:` when it names one, else any backend of the device).
  bool can_run_on(Device device) const;
  // Why the layer must not store its activations in dtype `t` whatever its backends support
  // (empty: no reason). The graph then keeps it f32 and reports the reason.
  virtual std::string dtype_refusal(DType t) const { return ""; }
  // How the layer's convolutions and GEMMs may multiply (train.precision): passed on in the op
  // arguments; implementations that have no TF32 path compute FP32 under tf32 too.
  MathMode math() const { return m_math; }
  // Resolves the spec's backend against the device; throws when an explicit one can't be
  // honoured. Returns a one-line note for the log when `auto` made a choice.
  std::string choose_backend(Device device);
  Backend backend() const { return m_backend; }
  // Our kernels on the layer's device (cpu, or cuda under the cuda and cudnn backends): where a
  // layer runs the parts cuDNN has no op for (a fused activation, phased batchnorm).
  Backend own_kernels() const { return m_backend == Backend::cpu ? Backend::cpu : Backend::cuda; }
  const std::string& requested_backend() const { return m_requested_backend; }
  // Whether the request came from train.backend (the layer said auto), not the layer's own
  // `backend:` key: the accuracy guard refuses the former with a warning, the latter with an error.
  bool backend_from_train() const { return m_backend_from_train; }
  // `auto` on a GPU where both cuda and cudnn support the layer: choose_backend takes cuda for now
  // and leaves the choice to the autotuner (tune/autotune.h), which measures both, then calls
  // set_backend. A choice is measured, never assumed.
  bool backend_to_measure() const { return m_measure_backend; }
  void set_backend(Backend b, std::string how);
  const std::string& backend_note() const { return m_backend_note; }  // how the backend was chosen

  // Binds parameter (and gradient) views, in the order of params(); grads of buffers are empty.
  void bind(std::vector<Tensor> params, std::vector<Tensor> grads);
  // Prepacked weights (WeightPackRequest): the copies the layer's ops read at `batch` for its chosen
  // algorithms (valid after choose_backend and the autotuner), backward's input gradient included
  // when input_grad; none on the CPU or in f32. bind_weight_packs gives them back with their data
  // (empty: none), used while RunContext::weights_packed says they are fresh.
  virtual std::vector<WeightPackRequest> weight_pack_requests(int64_t batch, bool input_grad) const { return {}; }
  virtual void bind_weight_packs(const std::vector<WeightPackRequest>& bound) {}
  // Per-batch scratch the layer keeps between forward and backward (e.g. batchnorm statistics).
  virtual void prepare(int64_t max_batch, Device device) {}
  // Bytes of the shared ctx.workspace one forward or backward call takes at `batch` besides a
  // convolution plan's (the dense bf16 cuda row's weight copy, say): planned_workspace_bytes
  // (tune/autotune.h) reserves the largest before a CUDA graph is captured. Valid after
  // choose_backend.
  virtual size_t workspace_bytes(int64_t batch) const { return 0; }

  // x: inputs (N, ...); y: output (N, ...), preallocated.
  virtual void forward(const RunContext& rc, const std::vector<const Tensor*>& x, Tensor& y) = 0;
  // dy (N, ...) -> dx[i] (same shape as x[i]; null when not needed), and the bound gradients.
  virtual void backward(const RunContext& rc, const std::vector<const Tensor*>& x, const Tensor& y,
                        const Tensor& dy, const std::vector<Tensor*>& dx) = 0;

  // Graph-level fusion (Graph::fuse_activations). An activation layer returns its function;
  // a producer asked to apply `act` in its own kernels (forward) and to take dy through act'
  // read from its saved output (backward) answers whether it can; null undoes the fusion.
  virtual const ActivationParams* activation() const { return nullptr; }
  virtual bool fuse_activation(const ActivationParams* act) { return false; }
  // Whether the fused activation runs on our kernels of the layer's device whatever backend the
  // layer's own op runs on (conv2d: a pass after its row), so a cudnn producer may take one too.
  virtual bool fuses_on_any_backend() const { return false; }
  // Conv bias folding (Graph::fold_conv_biases). A producer asked to leave its bias out of its
  // forward (backward keeps its gradient) answers whether it has one; false restores it.
  // folded_bias: that bias's FP32 storage (C) while folded, else null (read at run time: the
  // parameters are bound after the graph is built). A batchnorm asked to take `from`'s folded bias
  // as its mean offset (ops/batchnorm.h) answers whether it can; null undoes it.
  virtual bool fold_bias(bool on) { return false; }
  virtual const float* folded_bias() const { return nullptr; }
  virtual bool take_mean_offset(const Layer* from) { return false; }
  // Synchronised batch statistics (dist.sync_batchnorm): a layer that normalises with batch
  // statistics keeps `sync` (not owned; null turns it off) and answers true. join_sync_idle lets a
  // rank that runs no forward (or no backward) this step join the same reductions with zeros.
  virtual bool set_stats_reducer(StatsReducer* sync) { return false; }
  virtual void join_sync_idle(const RunContext& rc, bool backward) {}
  // The per-direction convolution plan (layers/conv_plan.h) of a layer that has one (conv2d), for
  // the autotuner and the benchmarks; null for every other layer.
  virtual ConvPlanned* conv_planned() { return nullptr; }
  virtual const ConvPlanned* conv_planned() const { return nullptr; }

  // A short human summary for tables ("3x3/1 p1, 64").
  virtual std::string summary() const { return ""; }

protected:
  [[noreturn]] void fail(const std::string& message) const;  // ConfigError at this layer
  void expect_rank(const Shape& s, int rank, const char* what) const;
  std::vector<Tensor> m_params;
  std::vector<Tensor> m_grads;

private:
  std::string m_name;
  std::string m_type;
  std::string m_path;  // "layers[3]"
  Location m_where;
  int m_index = 0;
  Value m_attrs;
  std::string m_requested_backend;
  std::string m_preferred_backend = "auto";  // train.backend
  bool m_backend_from_train = false;
  Backend m_backend = Backend::cpu;
  DType m_dtype = DType::f32;
  Precision m_precision = Precision::fp32;
  MathMode m_math = MathMode::fp32;
  bool m_measure_backend = false;
  std::string m_backend_note;
};

}  // namespace cnn
