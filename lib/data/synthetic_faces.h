// Synthetic stand-ins for real data: gray cartoon faces whose expression follows the FER2013 class
// (for up to 7 classes and 1 channel), otherwise class-dependent random patterns. Per-image random
// position, scale, tilt, brightness and noise, and jittered expression parameters, so a CNN can
// learn it but not trivially. Trap: image i is a pure function of (seed, i, sizes): the same seed
// gives the same images on any thread count, and label i is i % classes (balanced).
#pragma once

#include <cstdint>

#include "data/dataset.h"

namespace cnn {

Dataset make_synthetic_faces(int64_t n, int64_t classes, int64_t channels, int64_t height, int64_t width,
                             uint64_t seed);

}  // namespace cnn
