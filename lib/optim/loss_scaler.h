// Dynamic loss scaling for fp16 training (train.precision fp16, train.loss_scale; README
// "Precision"). The loss gradient is multiplied by a scale S before backward, so gradients too
// small for f16 (below 2^-24) survive the f16 activation gradients; after backward (and after the
// data-parallel mean, so every rank decides alike) the FP32 weight gradients are checked for
// inf/NaN and divided by S. A non-finite one skips the step: parameters and optimizer slots stay
// as they were (the optimizer's step count is rolled back by the caller), S halves. After
// growth_interval clean steps in a row S doubles. S stays a power of two in [kMinLossScale,
// kMaxLossScale], so scaling and unscaling only move exponents: exact.
// Batchnorm's running statistics keep the skipped step's forward update (as PyTorch's GradScaler
// does): the forward was a valid pass over real data; only its gradients overflowed.
// Trap: on the GPU the state lives in device memory and every decision is taken there (capturable
// in a CUDA graph: no host synchronisation); the host learns the outcome from a copy of the state
// that the step already brings back with its loss (TrainStep), through note(). Read last() only
// after such a copy (or read(), which synchronises).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "config/model_spec.h"
#include "core/exec_context.h"
#include "core/float_bits.h"
#include "core/host_device.h"
#include "core/tensor.h"

namespace cnn {

inline constexpr float kMinLossScale = 0x1p-24f;
inline constexpr float kMaxLossScale = 0x1p24f;

// The scaler's state, one struct in the memory of the run's device (plain data: copied as bytes).
struct LossScaleState {
  float scale = 65536.0f;
  int32_t found_inf = 0;      // the last checked gradients held an inf or NaN: that step was skipped
  int64_t clean_steps = 0;    // clean steps since the scale last changed
  int64_t skipped_steps = 0;  // steps skipped so far (the checkpoint keeps it)
  float guard = 0.0f;         // read by the optimizer's update: NaN skips it (overflow or non-finite loss)
  int32_t reserved = 0;
};
static_assert(sizeof(LossScaleState) == 32, "LossScaleState is copied as 32 bytes");

// After found_inf is known: the optimizer guard and the next scale. A non-finite loss (the run
// diverged: the trainer stops) only raises the guard and leaves the scale and counters alone.
// Written once for the CPU and the GPU.
CNN_HD void advance_loss_scale(LossScaleState& s, int64_t growth_interval, bool loss_finite) {
  const bool skip = s.found_inf != 0 || !loss_finite;
  s.guard = skip ? float_from_bits(0x7fc00000u) : 0.0f;
  if (!loss_finite) return;
  if (s.found_inf) {
    s.scale = s.scale * 0.5f < kMinLossScale ? kMinLossScale : s.scale * 0.5f;
    s.clean_steps = 0;
    ++s.skipped_steps;
    return;
  }
  if (++s.clean_steps >= growth_interval) {
    s.scale = s.scale * 2.0f > kMaxLossScale ? kMaxLossScale : s.scale * 2.0f;
    s.clean_steps = 0;
  }
}

class LossScaler {
 public:
  // The state starts at spec.init on `device` (the executor's).
  LossScaler(const LossScaleSpec& spec, const ExecContext& ctx);

  // x (n) *= S: the loss gradient before backward. Queued on ctx's stream on the GPU.
  void scale_gradient(const ExecContext& ctx, float* x, int64_t n) const;
  // After backward (and the data-parallel mean): found_inf = any non-finite element of grads (n),
  // grads /= S, then advance_loss_scale. `loss` is the batch loss in the device's memory (a device
  // scalar on the GPU, a host float on the CPU), or null when this rank has none (treated finite).
  // Queued and capturable on the GPU.
  void unscale_and_update(const ExecContext& ctx, float* grads, int64_t n, const float* loss);
  // The device scalar the optimizer's update reads as its guard: NaN when the step is skipped.
  const float* guard() const { return &m_dev->guard; }
  // The state in the device's memory, for a copy with the step's results.
  const LossScaleState* device_state() const { return m_dev; }

  // What the host knows: the state as of the last note() or read().
  const LossScaleState& last() const { return m_last; }
  void note(const LossScaleState& s) { m_last = s; }
  // Copies the state to the host (synchronises a GPU stream), notes and returns it.
  const LossScaleState& read(const ExecContext& ctx);

  // Checkpoint metadata ("loss_scale": {"scale", "clean_steps", "skipped_steps"}, decimal strings)
  // of the last noted state; load_state checks and writes them back (throws cnn::Error naming the
  // key and the allowed range).
  std::map<std::string, std::string> state() const;
  void load_state(const ExecContext& ctx, const std::map<std::string, std::string>& state);

  int64_t growth_interval() const { return m_growth_interval; }

 private:
  void write(const ExecContext& ctx, const LossScaleState& s);
  int64_t m_growth_interval;
  Tensor m_state;                   // one LossScaleState on the device (8 float slots)
  LossScaleState* m_dev = nullptr;  // m_state's memory
  LossScaleState m_last;
};

// --- CUDA (loss_scaler_cuda.cu; loss_scaler_nocuda.cpp throws without CUDA), on ctx's stream. ---
void loss_scale_multiply_cuda(const ExecContext& ctx, float* x, int64_t n, const LossScaleState* state);
void loss_scale_unscale_cuda(const ExecContext& ctx, float* grads, int64_t n, LossScaleState* state,
                             int64_t growth_interval, const float* loss);
// The state between host and device: the read waits for the stream; the write is queued.
void loss_scale_copy_cuda(const ExecContext& ctx, void* dst, const void* src, bool to_host);

}  // namespace cnn
