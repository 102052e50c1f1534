// Training augmentation (random crop with zero padding, horizontal flip, rotation, brightness and
// contrast jitter) and evaluation crops (centre, ten-crop), writing normalised float (C, h, w).
// Trap: a sample's random draws are a pure function of (seed, epoch, position in the epoch's global
// order), never of threads or ranks; this is what makes resume and multi-worker loading exact.
#pragma once

#include <cstdint>
#include <vector>

#include "config/model_spec.h"
#include "core/shape.h"
#include "data/normalize.h"

namespace cnn {

// Everything random about one training sample.
struct AugmentDraw {
  int64_t crop_y = 0, crop_x = 0;  // top-left of the crop in the zero-padded image
  bool flip = false;
  float angle = 0.0f;       // degrees, counter-clockwise as displayed (y down)
  float brightness = 0.0f;  // added, in 0..1 units
  float contrast = 1.0f;    // factor around the image's per-channel mean
};

class Augmenter {
public:
  // Checks the spec against the image size (ConfigError on impossible values).
  Augmenter(const AugmentSpec& spec, const Normalization& norm, int64_t channels, int64_t height, int64_t width);

  Shape sample_shape() const { return Shape{m_c, m_oh, m_ow}; }  // (C, crop, crop), or (C, H, W) without crop
  int64_t sample_numel() const { return m_c * m_oh * m_ow; }

  // Draws from Rng(seed, RngStream::augment, (epoch << 40) + position * 64).
  AugmentDraw draw(uint64_t seed, int64_t epoch, int64_t position) const;
  // Rotation about the image centre (bilinear, zero fill outside), then zero padding and crop, then
  // flip, then contrast and brightness (clamped to [0, 1]), then normalisation. Exact integer
  // sampling when the angle is 0.
  void apply(const uint8_t* src,  // (C, H, W)
             const AugmentDraw& d,
             float* dst) const;   // (C, h, w)
  // The centre crop (offset floor((H - crop) / 2)), normalised.
  void center_crop(const uint8_t* src,  // (C, H, W)
                   float* dst) const;   // (C, h, w)
  // Top-left, top-right, bottom-left, bottom-right, centre, then the same five flipped.
  void ten_crop(const uint8_t* src,  // (C, H, W)
                float* dst) const;   // (10, C, h, w)

private:
  void crop_exact(const uint8_t* src, int64_t y0, int64_t x0, bool flip, float* dst) const;

  AugmentSpec m_spec;
  Normalization m_norm;
  std::vector<float> m_lut;  // (C, 256)
  int64_t m_c, m_h, m_w, m_oh, m_ow, m_pad;
};

}  // namespace cnn
