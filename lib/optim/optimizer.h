// Optimizers over the executor's flat parameter and gradient buffers (one layout, named segments).
// Each state slot (momentum_buffer, exp_avg, ...) is one flat buffer of that same layout, so it
// slices per parameter into checkpoint tensors "optim.<param>.<slot>". Trap: the step count is
// not among those tensors; save step_count() in the checkpoint metadata and restore it with
// set_step_count(), or Adam's bias correction restarts from step 1. With slots on the GPU the step
// is queued on the context's stream: synchronise it before reading or loading the slots.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "config/model_spec.h"
#include "core/exec_context.h"
#include "core/shape.h"
#include "core/tensor.h"
#include "optim/optim_math.h"

namespace cnn {

struct ParamSegment {
  std::string name;    // "conv1.weight"
  int64_t offset = 0;  // first element in the flat buffers
  int64_t count = 0;
  bool decay = true;   // false: weight decay is not applied (biases, batchnorm)
  Shape shape;         // of the checkpoint tensors; empty means [count]

  ParamSegment() = default;
  // A constructor rather than aggregate init, so {name, offset, count} compiles without warnings.
  ParamSegment(std::string name_, int64_t offset_, int64_t count_, bool decay_ = true, Shape shape_ = {})
      : name(std::move(name_)), offset(offset_), count(count_), decay(decay_), shape(std::move(shape_)) {}
};

enum class OptimizerKind { sgd, adam, adamw, rmsprop };

// The per-step constants of the optimizer's rule for one weight-decay setting (optim_math.h).
struct UpdateConstants {
  OptimizerKind kind = OptimizerKind::sgd;
  SgdConstants sgd{};
  AdamConstants adam{};
  RmspropConstants rmsprop{};
};
// Both constant sets of one step, indexed by UpdateChunk::decay: [0] plain, [1] decayed.
struct StepConstants {
  UpdateConstants c[2];
};

struct UpdateOperands;

class Optimizer {
public:
  // Segments must have unique non-empty names and lie inside [0, total) without overlapping;
  // elements outside every segment are never updated. Slots start at zero, on `device`.
  Optimizer(const OptimizerSpec& spec, std::vector<ParamSegment> segments, int64_t total,
            Device device = Device::cpu);

  // One update of every segment with learning rate `lr` (the schedule's value for this step).
  // The context must be on the slots' device (never a silent copy); params and grads live there.
  // CPU: OpenMP over segments. CUDA: one fused kernel per call, queued on ctx's stream without
  // synchronising (the first CUDA step also uploads the segment table, once). Elementwise, so
  // the result does not depend on the thread count or the launch shape.
  void step(const ExecContext& ctx,
            float* params,       // (total)
            const float* grads,  // (total)
            double lr);

  // The capturable CUDA step (CUDA graphs), in two halves. advance() counts the step and returns
  // its constants, computed on the host exactly as step() computes them; the caller copies them to
  // device memory. step_from_device() queues the update reading them there, and skips the whole
  // update when the device float *guard (the batch loss; may be null) is not finite, so a diverged
  // step leaves parameters and slots untouched (the caller then undoes the count with
  // set_step_count). Same kernel and arithmetic as step(), so both give bit-identical results.
  StepConstants advance(double lr);
  void step_from_device(const ExecContext& ctx,
                        float* params,                 // (total)
                        const float* grads,            // (total)
                        const StepConstants* dconsts,  // device scalar
                        const float* guard);           // device scalar or null

  OptimizerKind kind() const { return m_kind; }
  const OptimizerSpec& spec() const { return m_spec; }
  const std::vector<ParamSegment>& segments() const { return m_segments; }
  int64_t total() const { return m_total; }
  Device device() const { return m_device; }

  // Slots of this optimizer, e.g. {"exp_avg", "exp_avg_sq"}; SGD without momentum has none.
  const std::vector<std::string>& slot_names() const { return m_slot_names; }
  // The flat slot buffer (total), on device().
  Tensor& slot(const std::string& name);
  const Tensor& slot(const std::string& name) const;

  // Steps taken so far; step() increments it before updating (Adam's t is 1 on the first step).
  int64_t step_count() const { return m_step_count; }
  void set_step_count(int64_t steps);

  // Checkpoint tensors "optim.<param>.<slot>", by segment then slot: views into the slot buffers
  // (valid while this optimizer lives), shaped like the segment.
  std::vector<std::pair<std::string, Tensor>> state_tensors();
  // Copies saved tensors back into the slots. Keys not starting with "optim." are ignored, so a
  // whole checkpoint can be passed. Missing, unexpected "optim.*" and wrongly shaped tensors are
  // reported together in one cnn::Error, and then nothing has been loaded.
  void load_state(const std::map<std::string, Tensor>& tensors);

private:
  int slot_index(const std::string& name) const;
  void step_cpu(const ExecContext& ctx, float* params, const float* grads, double lr);
  void step_cuda(const ExecContext& ctx, float* params, const float* grads, double lr);
  UpdateOperands cuda_operands(float* params, const float* grads);  // the plan, the slots

  OptimizerSpec m_spec;
  OptimizerKind m_kind;
  std::vector<ParamSegment> m_segments;
  int64_t m_total;
  Device m_device;
  std::shared_ptr<void> m_cuda_plan;  // UpdateChunk table on the GPU, built by the first CUDA step
  int64_t m_cuda_plan_chunks = 0;
  std::vector<std::string> m_slot_names;
  std::vector<Tensor> m_slots;  // parallel to m_slot_names, each (total)
  int64_t m_step_count = 0;
};

// Checks the spec (type, ranges of the hyperparameters) and builds the optimizer. An unknown type
// is a cnn::Error listing the known ones.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerSpec& spec, std::vector<ParamSegment> segments,
                                          int64_t total, Device device = Device::cpu);

// --- The fused CUDA update (optimizer_cuda.cu; optimizer_nocuda.cpp throws without CUDA). ---
// The kernel's work list: [begin, begin + count) shares one decay setting. Segments are merged
// into runs of equal decay and cut at multiples of kUpdateChunkElements, so a chunk is a block's
// work and interior chunk boundaries are 16-byte aligned. Elements in no segment are in no chunk.
struct UpdateChunk {
  int64_t begin;
  int32_t count;
  int32_t decay;  // 1: the decayed constants apply, 0: the plain ones
};
inline constexpr int64_t kUpdateChunkElements = 8192;

std::vector<UpdateChunk> make_update_plan(const std::vector<ParamSegment>& segments);
// Copies the plan to the GPU (on ctx's stream, then synchronises: the host vector is temporary).
std::shared_ptr<void> upload_update_plan_cuda(const ExecContext& ctx, const std::vector<UpdateChunk>& plan);
// The GPU buffers one fused update works on. Slots the rule lacks are null.
struct UpdateOperands {
  const UpdateChunk* plan = nullptr;  // (chunks), on the GPU
  int64_t chunks = 0;
  float* params = nullptr;       // (total)
  const float* grads = nullptr;  // (total)
  float* slot0 = nullptr;        // (total) or null
  float* slot1 = nullptr;        // (total) or null
};
// One fused update of every chunk, queued on ctx's stream.
void fused_update_cuda(const ExecContext& ctx, const UpdateConstants& decayed, const UpdateConstants& plain,
                       const UpdateOperands& ops);
// The same update with the constants read from device memory (dconsts) and skipped entirely when
// the device float *guard is not finite (guard may be null): capturable once, replayed every step.
void fused_update_cuda_device(const ExecContext& ctx, OptimizerKind kind,
                              const StepConstants* dconsts,  // device scalar
                              const float* guard,            // device scalar or null
                              const UpdateOperands& ops);

}  // namespace cnn
