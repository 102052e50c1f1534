// Augmenter (see augment.h). Every output pixel is computed by inverse mapping: flip -> crop in the
// padded image -> image coordinates -> inverse rotation -> source, so no intermediate images exist.
// The per-pixel math lives in augment_math.h, shared with the GPU-resident batches.
// Trap: padding and rotation fill with 0 in 0..1 units (black), which normalises to -mean/std.
#include "data/augment.h"

#include "core/error.h"
#include "core/rng.h"
#include "data/augment_math.h"

namespace cnn {

Augmenter::Augmenter(const AugmentSpec& spec, const Normalization& norm, int64_t channels, int64_t height,
                     int64_t width)
    : m_spec(spec), m_norm(norm), m_lut(normalization_table(norm)), m_c(channels), m_h(height), m_w(width) {
  CNN_CHECK(static_cast<int64_t>(norm.mean.size()) == channels && static_cast<int64_t>(norm.std.size()) == channels,
            "normalisation has {} means and {} stds for {} channels", norm.mean.size(), norm.std.size(), channels);
  auto bad = [](const char* key, const std::string& msg) { throw ConfigError({}, key, msg); };
  if (spec.crop_size < 0) bad("data.augment.random_crop.size", fmt::format("must be >= 0, got {}", spec.crop_size));
  if (spec.crop_padding < 0) {
    bad("data.augment.random_crop.padding", fmt::format("must be >= 0, got {}", spec.crop_padding));
  }
  m_pad = spec.crop_padding;
  m_oh = spec.crop_size > 0 ? spec.crop_size : height;
  m_ow = spec.crop_size > 0 ? spec.crop_size : width;
  if (m_oh > height + 2 * m_pad || m_ow > width + 2 * m_pad) {
    bad("data.augment.random_crop.size",
        fmt::format("a {}x{} crop does not fit the {}x{} input padded by {}", m_oh, m_ow, height, width, m_pad));
  }
  if (!(spec.rotate >= 0.0 && spec.rotate <= 180.0)) {
    bad("data.augment.rotate", fmt::format("must be in [0, 180] degrees, got {}", spec.rotate));
  }
  if (!(spec.brightness >= 0.0 && spec.brightness <= 1.0)) {
    bad("data.augment.brightness", fmt::format("must be in [0, 1], got {}", spec.brightness));
  }
  if (!(spec.contrast >= 0.0 && spec.contrast <= 1.0)) {
    bad("data.augment.contrast", fmt::format("must be in [0, 1], got {}", spec.contrast));
  }
}

AugmentDraw Augmenter::draw(uint64_t seed, int64_t epoch, int64_t position) const {
  // The draw order is fixed whatever is enabled, so turning one transform on doesn't move the others.
  Rng r(seed, static_cast<uint64_t>(RngStream::augment),
        (static_cast<uint64_t>(epoch) << 40) + static_cast<uint64_t>(position) * 64);
  AugmentDraw d;
  d.crop_y = static_cast<int64_t>(r.below(static_cast<uint64_t>(m_h + 2 * m_pad - m_oh + 1)));
  d.crop_x = static_cast<int64_t>(r.below(static_cast<uint64_t>(m_w + 2 * m_pad - m_ow + 1)));
  float u_flip = r.uniform(), u_angle = r.uniform(), u_bright = r.uniform(), u_contrast = r.uniform();
  d.flip = m_spec.hflip && u_flip < 0.5f;
  d.angle = static_cast<float>(m_spec.rotate * (2.0 * u_angle - 1.0));
  d.brightness = static_cast<float>(m_spec.brightness * (2.0 * u_bright - 1.0));
  d.contrast = static_cast<float>(1.0 + m_spec.contrast * (2.0 * u_contrast - 1.0));
  return d;
}

void Augmenter::crop_exact(const uint8_t* src, int64_t y0, int64_t x0, bool flip, float* dst) const {
  const AugmentPlan p = make_crop_plan(y0, x0, flip);
  for (int64_t c = 0; c < m_c; ++c) {
    const uint8_t* plane = src + c * m_h * m_w;
    const float* lut = m_lut.data() + c * 256;
    for (int64_t oy = 0; oy < m_oh; ++oy) {
      const int64_t iy = oy + y0;
      float* out = dst + (c * m_oh + oy) * m_ow;
      for (int64_t ox = 0; ox < m_ow; ++ox)
        out[ox] = augment_lut_pixel(plane, m_h, m_w, iy, augment_source_x(p, m_ow, ox), lut);
    }
  }
}

void Augmenter::apply(const uint8_t* src, const AugmentDraw& d, float* dst) const {
  const AugmentPlan p = make_augment_plan(d, m_pad);
  if (p.exact()) {
    crop_exact(src, p.y0, p.x0, p.flip, dst);
    return;
  }
  const int64_t hw = m_h * m_w;
  for (int64_t c = 0; c < m_c; ++c) {
    const uint8_t* plane = src + c * hw;
    float mean = 0.0f;
    if (p.use_mean) {
      uint64_t sum = 0;
      for (int64_t i = 0; i < hw; ++i) sum += plane[i];
      mean = augment_channel_mean(sum, hw);
    }
    for (int64_t oy = 0; oy < m_oh; ++oy) {
      const int64_t iy = oy + p.y0;
      float* out = dst + (c * m_oh + oy) * m_ow;
      for (int64_t ox = 0; ox < m_ow; ++ox) {
        out[ox] = augment_float_pixel(p, plane, m_h, m_w, iy, augment_source_x(p, m_ow, ox), mean, m_norm.mean[c],
                                      m_norm.std[c]);
      }
    }
  }
}

void Augmenter::center_crop(const uint8_t* src, float* dst) const {
  crop_exact(src, (m_h - m_oh) / 2, (m_w - m_ow) / 2, false, dst);
}

void Augmenter::ten_crop(const uint8_t* src, float* dst) const {
  const int64_t ys[5] = {0, 0, m_h - m_oh, m_h - m_oh, (m_h - m_oh) / 2};
  const int64_t xs[5] = {0, m_w - m_ow, 0, m_w - m_ow, (m_w - m_ow) / 2};
  const int64_t n = sample_numel();
  for (int k = 0; k < 10; ++k) crop_exact(src, ys[k % 5], xs[k % 5], k >= 5, dst + k * n);
}

}  // namespace cnn
