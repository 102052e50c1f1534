// Runs a Graph on one device: owns the flat parameter, gradient and buffer memory and the
// planned activation arena; forward for n <= max_batch samples, backward from d(loss)/d(output)
// with a hook called as each parameter's gradient becomes final (for bucketed all-reduce).
// One executor per graph at a time: constructing one binds the graph's layers to its memory.
// Trap: activations alias each other by the memory plan; a tensor is valid only inside its
// planned interval, so read outputs (output(), activation()) right after forward.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/exec_context.h"
#include "core/tensor.h"
#include "graph/graph.h"
#include "graph/memory_plan.h"
#include "graph/weight_packs.h"

namespace cnn {

// Called with the index (into Graph::params()) of a trainable parameter whose gradient is final.
using GradHook = std::function<void(int param_index)>;

// Brackets every layer's forward and backward (lib/bench implements it with CUDA events or the
// host clock); the executor itself never synchronises for timing.
class LayerTimer {
public:
  virtual ~LayerTimer() = default;
  virtual void begin(int node, bool backward) = 0;
  virtual void end(int node, bool backward) = 0;
};

class Executor {
public:
  Executor(Graph& graph, int64_t max_batch, const ExecContext& ctx, bool training = true);

  Graph& graph() { return m_graph; }
  int64_t max_batch() const { return m_max_batch; }
  const ExecContext& context() const { return m_ctx; }
  const MemoryPlan& plan() const { return m_plan; }
  // The 16-bit weight copies a training forward packs in one launch before its first layer
  // (graph/weight_packs.h; planned and allocated here, from the layers' algorithms as tuned so far,
  // and from graph.prepack_weights()). Their buffer is persistent: packed_weights_bytes().
  const WeightPackPlan& weight_packs() const { return m_packs; }
  int64_t packed_weights_bytes() const { return m_packs.bytes; }

  // Seeded initialisation of every parameter and buffer (host init, then copy to the device).
  void init_params(uint64_t seed);
  Tensor& params() { return m_params; }    // flat (params_size)
  Tensor& grads() { return m_grads; }      // flat, same layout
  Tensor& buffers() { return m_buffers; }  // flat (buffers_size)
  // View of one named tensor (trainable -> params, else buffers) / its gradient.
  Tensor param(int index);
  Tensor grad(int index);

  // (max_batch, C, H, W): write the batch here, then forward(n). Stored in input_dtype(): f32 NCHW
  // unless set_input_dtype chose the readers' 16-bit dtype (then in its activation layout,
  // channels-last: ops/convert.h activation_layout).
  Tensor& input() { return m_input; }
  // The dtype every layer reading the model input computes in: bf16 or f16 when they all agree on
  // it (a batch stored in it needs no cast), else f32 (fp32 runs, an fp32 first layer, readers of
  // different dtypes).
  DType native_input_dtype() const;
  // What input() holds from now on: f32 (the default; forward casts it for 16-bit readers, as the
  // memory plan says) or native_input_dtype() (the readers take it as it is: no cast kernel, and
  // half the bytes). The same memory either way (a 16-bit batch fills the first half of the f32
  // one's bytes); nothing is converted, so choose before writing the batch. Throws for any other dtype.
  // Trap: a CUDA graph captured over forward() bakes in the choice; TrainStep drops its graphs when it
  // changes.
  void set_input_dtype(DType t);
  DType input_dtype() const { return m_input.dtype(); }
  // set_input_dtype(t) keeping the batch: the values now in input() (all max_batch rows) cast into
  // t as forward would cast them. Allocates a temporary and waits for the copy: not in a capture.
  void convert_input(DType t);
  void forward(int64_t n, bool training, uint64_t step, uint64_t seed);
  const Tensor& output() const { return m_output_view; }   // (n, K) after forward
  Tensor activation(int node) const;                        // (n, ...) of the last forward
  // d(loss)/d(output) goes here before backward(): (n, K)
  Tensor& output_grad() { return m_output_grad_view; }
  void backward(const GradHook& hook = {});

  // A diagnostic forward that checks each layer's output as it is produced: returns the first
  // node whose output holds NaN or Inf (-2 when the input batch itself does), or -1.
  // Same arguments as forward(); training-mode side effects (batchnorm statistics) happen too.
  int forward_find_nonfinite(int64_t n, bool training, uint64_t step, uint64_t seed);
  // CUDA graphs: kernels that use the seed and step (dropout) read them from this device buffer
  // (2 uint64: seed, step) instead of the forward() arguments, so a captured step replays with
  // new values. Null (the default) turns it off. Not owned.
  void set_device_seed_step(const uint64_t* seed_step) { m_device_seed_step = seed_step; }
  // Per-layer timing of later forward/backward calls; null turns it off. Not owned.
  void set_layer_timer(LayerTimer* timer) { m_timer = timer; }

private:
  int run_forward(int64_t n, bool training, uint64_t step, uint64_t seed, bool check_finite);
  Tensor act_view(int node, int64_t n) const;
  Tensor grad_view(int node, int64_t n) const;
  Tensor arena_view(const PlannedTensor& t, const Shape& shape, DType dtype) const;
  // Node i's inputs as the layer reads them: planned casts in its dtype (converted when forward).
  std::vector<Tensor> inputs_of(int i, int64_t n, const Tensor& input, bool forward) const;
  // from -> to (equal numel), each in its dtype's layout (ops/convert.h), on the run's stream.
  void convert(const Tensor& from, Tensor& to) const;
  // Plans, allocates and binds the weight packs (constructor); packs them (a training forward).
  void setup_weight_packs(bool training);
  void pack_weights() const;
  Graph& m_graph;
  int64_t m_max_batch;
  ExecContext m_ctx;
  MemoryPlan m_plan;
  Tensor m_params, m_grads, m_buffers;
  Tensor m_arena, m_scratch, m_input;  // m_input: a view of m_input_f32's memory in input_dtype()
  Tensor m_input_f32;
  Tensor m_output_view, m_output_grad_view;
  int64_t m_n = 0;
  bool m_training = true;
  uint64_t m_step = 0, m_seed = 0;
  LayerTimer* m_timer = nullptr;
  const uint64_t* m_device_seed_step = nullptr;
  WeightPackPlan m_packs;
  Tensor m_packed, m_pack_table;       // the copies; their WeightPackEntry table (device memory)
  int m_pack_count = 0;                // entries of the table
  std::vector<int64_t> m_pack_groups;  // of each launch (conv2d_weights_bf16.h)
  bool m_packs_fresh = false;          // the last forward packed them (a training forward)
};

}  // namespace cnn
