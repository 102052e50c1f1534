// Per-pixel sampling of the Augmenter written once for the CPU (augment.cpp) and the GPU-resident
// batches (gpu_dataset_cuda.cu), so both produce the same floats. Trap: nvcc contracts a * b + c
// into one FMA by default, which rounds once instead of twice; every product and sum here goes
// through augment_mul/add/sub so the GPU rounds exactly like the CPU.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/host_device.h"
#include "data/augment.h"

namespace cnn {

// How one output image is sampled from its source image, resolved on the host from an AugmentDraw
// (or an evaluation crop). Trivially copyable: the GPU receives arrays of these.
struct AugmentPlan {
  int64_t y0 = 0, x0 = 0;      // image coordinates of the crop's top-left (negative inside the zero padding)
  bool flip = false;           // mirror the crop horizontally
  bool rotate = false;         // angle != 0: bilinear inverse rotation about the image centre
  bool photometric = false;    // brightness != 0 or contrast != 1
  bool use_mean = false;       // contrast != 1: jitter around the channel mean (Augmenter::apply uses 0 otherwise)
  float cs = 1.0f, sn = 0.0f;  // cos and sin of the angle
  float brightness = 0.0f, contrast = 1.0f;

  // Integer sampling through the normalisation table (Augmenter's crop_exact path).
  CNN_HD bool exact() const { return !rotate && !photometric; }
};

// The plan of a training draw; `pad` is the crop padding. Host only (cos/sin in double, as before).
inline AugmentPlan make_augment_plan(const AugmentDraw& d, int64_t pad) {
  AugmentPlan p;
  p.y0 = d.crop_y - pad;
  p.x0 = d.crop_x - pad;
  p.flip = d.flip;
  p.rotate = d.angle != 0.0f;
  p.photometric = d.brightness != 0.0f || d.contrast != 1.0f;
  p.use_mean = d.contrast != 1.0f;
  const double rad = static_cast<double>(d.angle) * 3.14159265358979323846 / 180.0;
  p.cs = static_cast<float>(std::cos(rad));
  p.sn = static_cast<float>(std::sin(rad));
  p.brightness = d.brightness;
  p.contrast = d.contrast;
  return p;
}

// The plan of a fixed crop at image coordinates (y0, x0), optionally mirrored (evaluation).
inline AugmentPlan make_crop_plan(int64_t y0, int64_t x0, bool flip) {
  AugmentPlan p;
  p.y0 = y0;
  p.x0 = x0;
  p.flip = flip;
  return p;
}

CNN_HD float augment_mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
CNN_HD float augment_add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
CNN_HD float augment_sub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

// Mean of one channel in 0..1 units from its exact integer sum over hw pixels.
CNN_HD float augment_channel_mean(uint64_t sum, int64_t hw) {
  return static_cast<float>(sum) / static_cast<float>(hw) / 255.0f;
}

// Image column read by output column ox of a crop `ow` wide.
CNN_HD int64_t augment_source_x(const AugmentPlan& p, int64_t ow, int64_t ox) {
  return (p.flip ? ow - 1 - ox : ox) + p.x0;
}

// Normalised value of image pixel (iy, ix) by table look-up; outside the image it is pixel value 0.
CNN_HD float augment_lut_pixel(const uint8_t* plane,  // (h, w)
                               int64_t h, int64_t w, int64_t iy, int64_t ix,
                               const float* lut) {  // (256) of this channel
  const bool inside = iy >= 0 && iy < h && ix >= 0 && ix < w;
  return lut[inside ? plane[iy * w + ix] : 0];
}

// Pixel (y, x) in 0..255 units, 0 outside the image.
CNN_HD float augment_value_at(const uint8_t* plane,  // (h, w)
                              int64_t h, int64_t w, int64_t y, int64_t x) {
  return (y >= 0 && y < h && x >= 0 && x < w) ? static_cast<float>(plane[y * w + x]) : 0.0f;
}

// Bilinear sample (0..255 units) at the inverse of a counter-clockwise (as displayed, y down)
// rotation of image point (iy, ix) about the image centre.
CNN_HD float augment_rotated_value(const uint8_t* plane,  // (h, w)
                                   int64_t h, int64_t w, int64_t iy, int64_t ix, float cs, float sn) {
  const float cy = 0.5f * static_cast<float>(h - 1), cx = 0.5f * static_cast<float>(w - 1);
  const float dx = augment_sub(static_cast<float>(ix), cx), dy = augment_sub(static_cast<float>(iy), cy);
  const float sx = augment_add(augment_sub(augment_mul(cs, dx), augment_mul(sn, dy)), cx);
  const float sy = augment_add(augment_add(augment_mul(sn, dx), augment_mul(cs, dy)), cy);
  const float fx0 = floorf(sx), fy0 = floorf(sy);
  const int64_t x0 = static_cast<int64_t>(fx0), y0 = static_cast<int64_t>(fy0);
  const float fx = augment_sub(sx, fx0), fy = augment_sub(sy, fy0);
  const float gx = augment_sub(1.0f, fx), gy = augment_sub(1.0f, fy);
  const float top = augment_add(augment_mul(augment_value_at(plane, h, w, y0, x0), gx),
                                augment_mul(augment_value_at(plane, h, w, y0, x0 + 1), fx));
  const float bottom = augment_add(augment_mul(augment_value_at(plane, h, w, y0 + 1, x0), gx),
                                   augment_mul(augment_value_at(plane, h, w, y0 + 1, x0 + 1), fx));
  return augment_add(augment_mul(top, gy), augment_mul(bottom, fy));
}

// The float path of Augmenter::apply for image point (iy, ix) of one channel: rotation, scaling to
// 0..1, contrast and brightness (clamped to [0, 1]), normalisation. `mean`: the channel mean in 0..1
// when p.use_mean, else 0.
CNN_HD float augment_float_pixel(const AugmentPlan& p, const uint8_t* plane,  // (h, w)
                                 int64_t h, int64_t w, int64_t iy, int64_t ix, float mean, float norm_mean,
                                 float norm_std) {
  float v = p.rotate ? augment_rotated_value(plane, h, w, iy, ix, p.cs, p.sn) : augment_value_at(plane, h, w, iy, ix);
  v = augment_mul(v, 1.0f / 255.0f);
  if (p.photometric) {
    v = augment_add(augment_add(augment_mul(augment_sub(v, mean), p.contrast), mean), p.brightness);
    v = v < 0.0f ? 0.0f : (1.0f < v ? 1.0f : v);  // std::clamp(v, 0, 1)
  }
  return augment_sub(v, norm_mean) / norm_std;
}

// Output pixel (oy, ox) of one channel of a plan's image, whichever path it takes.
CNN_HD float augment_pixel(const AugmentPlan& p, const uint8_t* plane,  // (h, w)
                           int64_t h, int64_t w, int64_t ow, int64_t oy, int64_t ox,
                           const float* lut,  // (256) of this channel
                           float mean, float norm_mean, float norm_std) {
  const int64_t iy = oy + p.y0, ix = augment_source_x(p, ow, ox);
  return p.exact() ? augment_lut_pixel(plane, h, w, iy, ix, lut)
                   : augment_float_pixel(p, plane, h, w, iy, ix, mean, norm_mean, norm_std);
}

}  // namespace cnn
