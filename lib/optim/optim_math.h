// Per-element update rules of SGD, Adam, AdamW and RMSProp, written once for the CPU loop and a
// future CUDA kernel (PyTorch torch.optim semantics). Trap: the per-step scalars (bias
// corrections, AdamW's decay factor, 1 - beta) are computed once on the host in double and passed
// in as float; never recompute them per element or in float (1.0f - 0.999f is visibly off).
#pragma once

#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace cnn {

// torch.optim.SGD with dampening 0. The momentum buffer starts at zero: momentum*0 + g == g
// exactly, which is PyTorch's "first step buf = g" without a special case.
struct SgdConstants {
  float lr;
  float momentum;      // 0 = plain SGD (no buffer is touched)
  float weight_decay;  // L2, added to the gradient
  bool nesterov;
};

CNN_HD void sgd_update(float& p, float g, float& buf, const SgdConstants& c) {
  if (c.weight_decay != 0.0f) g = g + c.weight_decay * p;
  if (c.momentum != 0.0f) {
    buf = c.momentum * buf + g;
    g = c.nesterov ? g + c.momentum * buf : buf;
  }
  p = p - c.lr * g;
}

// torch.optim.Adam / AdamW (amsgrad off). Per step t (1-based):
//   g += wd_l2 * p;  p *= decay_factor                    (L2 for Adam, decoupled for AdamW)
//   m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g*g
//   p -= (lr / (1-b1^t)) * m / (sqrt(v) / sqrt(1-b2^t) + eps)
struct AdamConstants {
  float beta1, beta2, eps;
  float one_minus_beta1, one_minus_beta2;  // from double: 1.0f - 0.999f is off by 5e-5 relative
  float weight_decay_l2;  // Adam's L2 term (0 for AdamW)
  float decay_factor;     // AdamW's 1 - lr*wd (1 for Adam)
  float step_size;        // lr / (1 - beta1^t)
  float bias_correction2_sqrt;  // sqrt(1 - beta2^t)
};

// Host side: the constants of step t (t >= 1). `decoupled` selects AdamW.
inline AdamConstants adam_constants(double lr, double beta1, double beta2, double eps,
                                    double weight_decay, bool decoupled, int64_t t) {
  double bc1 = 1.0 - std::pow(beta1, static_cast<double>(t));
  double bc2 = 1.0 - std::pow(beta2, static_cast<double>(t));
  AdamConstants c;
  c.beta1 = static_cast<float>(beta1);
  c.beta2 = static_cast<float>(beta2);
  c.eps = static_cast<float>(eps);
  c.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  c.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  c.weight_decay_l2 = decoupled ? 0.0f : static_cast<float>(weight_decay);
  c.decay_factor = decoupled ? static_cast<float>(1.0 - lr * weight_decay) : 1.0f;
  c.step_size = static_cast<float>(lr / bc1);
  c.bias_correction2_sqrt = static_cast<float>(std::sqrt(bc2));
  return c;
}

CNN_HD void adam_update(float& p, float g, float& m, float& v, const AdamConstants& c) {
  if (c.weight_decay_l2 != 0.0f) g = g + c.weight_decay_l2 * p;
  p = p * c.decay_factor;
  m = c.beta1 * m + c.one_minus_beta1 * g;
  v = c.beta2 * v + c.one_minus_beta2 * g * g;
  float denom = sqrtf(v) / c.bias_correction2_sqrt + c.eps;
  p = p - c.step_size * (m / denom);
}

// torch.optim.RMSprop (centered off):
//   g += wd*p;  s = alpha*s + (1-alpha)*g*g;  a = sqrt(s) + eps
//   momentum > 0: buf = momentum*buf + g/a; p -= lr*buf     else: p -= lr*g/a
struct RmspropConstants {
  float lr;
  float alpha;
  float one_minus_alpha;  // computed in double on the host
  float eps;
  float momentum;  // 0 = no buffer is touched
  float weight_decay;
};

CNN_HD void rmsprop_update(float& p, float g, float& square_avg, float& buf, const RmspropConstants& c) {
  if (c.weight_decay != 0.0f) g = g + c.weight_decay * p;
  square_avg = c.alpha * square_avg + c.one_minus_alpha * g * g;
  float avg = sqrtf(square_avg) + c.eps;
  if (c.momentum > 0.0f) {
    buf = c.momentum * buf + g / avg;
    p = p - c.lr * buf;
  } else {
    p = p - c.lr * (g / avg);
  }
}

}  // namespace cnn
