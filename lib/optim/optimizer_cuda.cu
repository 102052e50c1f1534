// The fused optimizer update on the GPU: one kernel per step over a chunk table (runs of segments
// with equal weight decay, cut into block-sized pieces) applying optim_math.h's CNN_HD rules; the
// decayed and plain constant sets travel in the launch parameters and each chunk picks one.
// Trap: elements in no segment are in no chunk and stay untouched; a chunk may start at any
// element, so its float4 body is bracketed by scalar heads and tails.
#include <memory>
#include <vector>

#include "core/cuda_check.h"
#include "ops/elementwise.cuh"
#include "optim/optim_math.h"
#include "optim/optimizer.h"

namespace cnn {

static constexpr int kThreads = 256;

enum class Rule { sgd, adam, rmsprop };

// One element; slots the rule does not have are not loaded (kSlots = how many it has).
template <Rule R, int kSlots>
__device__ __forceinline__ void update_one(const UpdateConstants& k, float& p, float g, float& s0, float& s1) {
  if (R == Rule::sgd) sgd_update(p, g, s0, k.sgd);
  if (R == Rule::adam) adam_update(p, g, s0, s1, k.adam);
  if (R == Rule::rmsprop) rmsprop_update(p, g, s0, s1, k.rmsprop);
}

template <Rule R, int kSlots>
__device__ __forceinline__ void update_scalar(const UpdateConstants& k, int64_t i, float* params, const float* grads,
                                              float* slot0, float* slot1) {
  float p = params[i], s0 = 0.0f, s1 = 0.0f;
  if (kSlots > 0) s0 = slot0[i];
  if (kSlots > 1) s1 = slot1[i];
  update_one<R, kSlots>(k, p, grads[i], s0, s1);
  params[i] = p;
  if (kSlots > 0) slot0[i] = s0;
  if (kSlots > 1) slot1[i] = s1;
}

template <Rule R, int kSlots>
__device__ __forceinline__ void update_vec4(const UpdateConstants& k, int64_t i4, float* params, const float* grads,
                                            float* slot0, float* slot1) {
  float4 p = cuda::load4(params, i4);
  const float4 g = cuda::load4(grads, i4);
  float4 s0 = make_float4(0.0f, 0.0f, 0.0f, 0.0f), s1 = s0;
  if (kSlots > 0) s0 = cuda::load4(slot0, i4);
  if (kSlots > 1) s1 = cuda::load4(slot1, i4);
  update_one<R, kSlots>(k, p.x, g.x, s0.x, s1.x);
  update_one<R, kSlots>(k, p.y, g.y, s0.y, s1.y);
  update_one<R, kSlots>(k, p.z, g.z, s0.z, s1.z);
  update_one<R, kSlots>(k, p.w, g.w, s0.w, s1.w);
  cuda::store4(params, i4, p);
  if (kSlots > 0) cuda::store4(slot0, i4, s0);
  if (kSlots > 1) cuda::store4(slot1, i4, s1);
}

// Block b handles chunks b, b + gridDim.x, ...; kVec: every buffer is 16-byte aligned. The
// constants come from the launch (dconsts null) or from device memory (a captured graph's launch
// parameters are frozen); a non-finite *guard (the batch loss) skips the whole update.
template <Rule R, int kSlots, bool kVec>
static __global__ void optimizer_update_fused_kernel(const __grid_constant__ StepConstants consts,
                                                     const StepConstants* __restrict__ dconsts,  // scalar or null
                                                     const float* __restrict__ guard,            // scalar or null
                                                     const UpdateChunk* __restrict__ plan,  // (chunks)
                                                     int64_t chunks,
                                                     float* __restrict__ params,       // (total)
                                                     const float* __restrict__ grads,  // (total)
                                                     float* __restrict__ slot0,        // (total) or null
                                                     float* __restrict__ slot1) {      // (total) or null
  if (guard && !isfinite(*guard)) return;
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const UpdateChunk chunk = plan[c];
    const UpdateConstants k = dconsts ? dconsts->c[chunk.decay] : consts.c[chunk.decay];
    const int64_t begin = chunk.begin, end = begin + chunk.count;
    if (!kVec) {
      for (int64_t i = begin + threadIdx.x; i < end; i += kThreads)
        update_scalar<R, kSlots>(k, i, params, grads, slot0, slot1);
      continue;
    }
    const int64_t body_begin = min(end, (begin + 3) & ~int64_t{3}), body_end = max(body_begin, end & ~int64_t{3});
    for (int64_t i = begin + threadIdx.x; i < body_begin; i += kThreads)
      update_scalar<R, kSlots>(k, i, params, grads, slot0, slot1);
    for (int64_t i4 = body_begin / 4 + threadIdx.x; i4 < body_end / 4; i4 += kThreads)
      update_vec4<R, kSlots>(k, i4, params, grads, slot0, slot1);
    for (int64_t i = body_end + threadIdx.x; i < end; i += kThreads)
      update_scalar<R, kSlots>(k, i, params, grads, slot0, slot1);
  }
}

template <Rule R, int kSlots>
static void launch_rule(cudaStream_t stream, const StepConstants& consts, const StepConstants* dconsts,
                        const float* guard, const UpdateChunk* plan, int64_t chunks, float* params,
                        const float* grads, float* slot0, float* slot1) {
  const bool vec = cuda::aligned16(params) && cuda::aligned16(grads) && (kSlots < 1 || cuda::aligned16(slot0)) &&
                   (kSlots < 2 || cuda::aligned16(slot1));
  const unsigned blocks = cuda::grid_blocks(chunks, 1);
  if (vec)
    optimizer_update_fused_kernel<R, kSlots, true>
        <<<blocks, kThreads, 0, stream>>>(consts, dconsts, guard, plan, chunks, params, grads, slot0, slot1);
  else
    optimizer_update_fused_kernel<R, kSlots, false>
        <<<blocks, kThreads, 0, stream>>>(consts, dconsts, guard, plan, chunks, params, grads, slot0, slot1);
}

std::shared_ptr<void> upload_update_plan_cuda(const ExecContext& ctx, const std::vector<UpdateChunk>& plan) {
  cudaStream_t stream = cuda::stream_of(ctx, "optimizer plan upload");
  if (plan.empty()) return std::shared_ptr<void>(nullptr, [](void*) {});
  const size_t bytes = plan.size() * sizeof(UpdateChunk);
  std::shared_ptr<void> dev(device_malloc(Device::cuda, bytes, "optimizer update plan"),
                            [](void* p) { device_free(Device::cuda, p); });
  CUDA_CHECK(cudaMemcpyAsync(dev.get(), plan.data(), bytes, cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return dev;
}

// Picks the rule's kernel; slots the rule lacks are null.
static void launch_update(cudaStream_t stream, OptimizerKind kind, const StepConstants& consts,
                          const StepConstants* dconsts, const float* guard, const UpdateOperands& ops) {
  const UpdateChunk* plan = ops.plan;
  const int64_t chunks = ops.chunks;
  float* params = ops.params;
  const float* grads = ops.grads;
  float* slot0 = ops.slot0;
  float* slot1 = ops.slot1;
  switch (kind) {
    case OptimizerKind::sgd:
      if (slot0)
        launch_rule<Rule::sgd, 1>(stream, consts, dconsts, guard, plan, chunks, params, grads, slot0, nullptr);
      else
        launch_rule<Rule::sgd, 0>(stream, consts, dconsts, guard, plan, chunks, params, grads, nullptr, nullptr);
      break;
    case OptimizerKind::adam:
    case OptimizerKind::adamw:
      CNN_CHECK(slot0 && slot1, "optimizer step: adam needs two slots");
      launch_rule<Rule::adam, 2>(stream, consts, dconsts, guard, plan, chunks, params, grads, slot0, slot1);
      break;
    case OptimizerKind::rmsprop:
      CNN_CHECK(slot0, "optimizer step: rmsprop needs its square_avg slot");
      if (slot1)
        launch_rule<Rule::rmsprop, 2>(stream, consts, dconsts, guard, plan, chunks, params, grads, slot0, slot1);
      else
        launch_rule<Rule::rmsprop, 1>(stream, consts, dconsts, guard, plan, chunks, params, grads, slot0, nullptr);
      break;
  }
  CUDA_CHECK_LAUNCH("optimizer step (fused update)");
}

void fused_update_cuda(const ExecContext& ctx, const UpdateConstants& decayed, const UpdateConstants& plain,
                       const UpdateOperands& ops) {
  cudaStream_t stream = cuda::stream_of(ctx, "optimizer step");
  if (ops.chunks == 0) return;
  const StepConstants consts{{plain, decayed}};
  launch_update(stream, decayed.kind, consts, nullptr, nullptr, ops);
}

void fused_update_cuda_device(const ExecContext& ctx, OptimizerKind kind,
                              const StepConstants* dconsts,  // device scalar
                              const float* guard,            // device scalar or null
                              const UpdateOperands& ops) {
  cudaStream_t stream = cuda::stream_of(ctx, "optimizer step (device constants)");
  CNN_CHECK(dconsts != nullptr, "optimizer step (device constants): null constants");
  if (ops.chunks == 0) return;
  launch_update(stream, kind, StepConstants{}, dconsts, guard, ops);
}

}  // namespace cnn
