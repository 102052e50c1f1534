// The bits of an IEEE float and back, for the 16-bit storage formats (core/bf16.h, core/fp16.h),
// written once for the host and the device (CNN_HD).
// Trap: memcpy, not a pointer cast or a union: the only type pun that is defined in C++ and CUDA.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/host_device.h"

namespace cnn {

CNN_HD uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
CNN_HD float float_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

}  // namespace cnn
