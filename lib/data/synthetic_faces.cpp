// Rendering of synthetic_faces.h: shapes are drawn by signed distance in face coordinates with a
// one-pixel soft edge (so small images still anti-alias), then noise is added and values quantised.
// Trap: coordinates are y-down; "inner brow lower" is a positive tilt.
#include "data/synthetic_faces.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "core/error.h"
#include "core/rng.h"
#include "data/data_limits.h"
#include "data/parallel_errors.h"

namespace cnn {

namespace {

// Philox stream ids of this file (RngStream has no entry for generated data).
constexpr uint64_t kFaceStream = 0x5F4E7A01;
constexpr uint64_t kPatternStream = 0x5F4E7A02;
constexpr uint64_t kPrototypeStream = 0x5F4E7A03;

// One expression, in face units (face half-width 0.36, half-height 0.45; y down).
struct Expression {
  double eye_open;   // eye height factor
  double brow_h;     // brow height above the eye centre
  double brow_tilt;  // inner end lower by this much (outer higher)
  double mouth_w;    // mouth half-width
  double mouth_curv; // > 0 smile, < 0 frown
  double mouth_open; // half-opening at the centre
  double mouth_asym; // one corner raised
};

// angry, disgust, fear, happy, sad, surprise, neutral
constexpr Expression kExpressions[7] = {
    {0.60, 0.065, 0.045, 0.13, -0.020, 0.000, 0.00},
    {0.50, 0.080, 0.025, 0.12, -0.030, 0.008, 0.04},
    {1.45, 0.130, -0.035, 0.15, -0.010, 0.035, 0.00},
    {0.55, 0.100, 0.000, 0.17, 0.060, 0.015, 0.00},
    {0.80, 0.100, -0.045, 0.13, -0.050, 0.000, 0.00},
    {1.70, 0.160, 0.000, 0.07, 0.000, 0.070, 0.00},
    {1.00, 0.100, 0.000, 0.13, 0.000, 0.000, 0.00},
};

double coverage(double dist, double pixel) { return std::clamp(0.5 - dist / pixel, 0.0, 1.0); }

double ellipse_dist(double a, double b, double rx, double ry) {
  return (std::sqrt((a / rx) * (a / rx) + (b / ry) * (b / ry)) - 1.0) * std::min(rx, ry);
}

double segment_dist(double a, double b, double a0, double b0, double a1, double b1) {
  double da = a1 - a0, db = b1 - b0;
  double t = std::clamp(((a - a0) * da + (b - b0) * db) / (da * da + db * db), 0.0, 1.0);
  return std::hypot(a - (a0 + t * da), b - (b0 + t * db));
}

void draw_face(Rng& rng, int64_t label, int64_t h, int64_t w, float* out /* (h, w) */) {
  Expression e = kExpressions[label];
  e.eye_open *= std::exp(0.15 * rng.normal());
  e.brow_h += 0.010 * rng.normal();
  e.brow_tilt += 0.012 * rng.normal();
  e.mouth_w *= std::exp(0.10 * rng.normal());
  e.mouth_curv += 0.012 * rng.normal();
  e.mouth_open = std::max(0.0, e.mouth_open + 0.008 * rng.normal());
  const double cx = 0.5 + 0.06 * (2 * rng.uniform() - 1), cy = 0.52 + 0.06 * (2 * rng.uniform() - 1);
  const double scale = 0.85 + 0.25 * rng.uniform();
  const double tilt = 0.14 * (2 * rng.uniform() - 1);  // radians, about 8 degrees
  const double bg = 0.1 + 0.4 * rng.uniform(), bg_slope = 0.3 * (2 * rng.uniform() - 1);
  const double skin = 0.55 + 0.35 * rng.uniform();
  const double ink = skin * (0.15 + 0.2 * rng.uniform());
  const double noise = 0.02 + 0.04 * rng.uniform();
  const double ct = std::cos(tilt), st = std::sin(tilt);
  const double pixel = 1.0 / (scale * static_cast<double>(std::min(h, w)));
  for (int64_t y = 0; y < h; ++y) {
    for (int64_t x = 0; x < w; ++x) {
      double u = (x + 0.5) / static_cast<double>(w), v = (y + 0.5) / static_cast<double>(h);
      double du = (u - cx) / scale, dv = (v - cy) / scale;
      double a = ct * du + st * dv, b = -st * du + ct * dv;
      double val = bg + bg_slope * (u - 0.5);
      val += (skin - val) * coverage(ellipse_dist(a, b, 0.36, 0.45), pixel);
      double feature = 0.0;
      for (int side = -1; side <= 1; side += 2) {
        double ex = 0.14 * side, ey = -0.08;
        feature = std::max(feature, coverage(ellipse_dist(a - ex, b - ey, 0.065, 0.035 * e.eye_open), pixel));
        double by = ey - e.brow_h;
        double d = segment_dist(a, b, 0.06 * side, by + e.brow_tilt, 0.22 * side, by - e.brow_tilt) - 0.018;
        feature = std::max(feature, coverage(d, pixel));
      }
      feature = std::max(feature, 0.5 * coverage(segment_dist(a, b, 0.0, -0.02, 0.0, 0.09) - 0.008, pixel));
      if (label == 1) {  // disgust: wrinkled nose
        for (int side = -1; side <= 1; side += 2) {
          double d = segment_dist(a, b, 0.02 * side, 0.02, 0.07 * side, 0.0) - 0.007;
          feature = std::max(feature, 0.8 * coverage(d, pixel));
        }
      }
      double t = a / e.mouth_w;
      double line = 0.22 + e.mouth_curv * (1 - t * t) - e.mouth_asym * t;
      double half = 0.012 + e.mouth_open * std::sqrt(std::max(0.0, 1 - t * t));
      double md = std::max(std::abs(b - line) - half, std::abs(a) - e.mouth_w);
      feature = std::max(feature, coverage(md, pixel));
      val += (ink - val) * feature;
      out[y * w + x] = static_cast<float>(val + noise * rng.normal());
    }
  }
}

// Class prototype: three gaussian blobs and a grating, each with per-channel amplitudes.
struct Pattern {
  double bx[3], by[3], bs[3], amp[3][3];
  double angle, freq, phase, gamp[3];
};

Pattern make_pattern(int64_t classes, int64_t channels, int64_t c) {
  Rng r(static_cast<uint64_t>(classes * 8 + channels), kPrototypeStream, static_cast<uint64_t>(c) << 16);
  Pattern p{};
  for (int k = 0; k < 3; ++k) {
    p.bx[k] = 0.2 + 0.6 * r.uniform();
    p.by[k] = 0.2 + 0.6 * r.uniform();
    p.bs[k] = 0.06 + 0.12 * r.uniform();
    for (int ch = 0; ch < 3; ++ch) p.amp[k][ch] = (r.uniform() < 0.5 ? -1 : 1) * (0.25 + 0.35 * r.uniform());
  }
  p.angle = 3.14159265358979 * r.uniform();
  p.freq = 2 + 4 * r.uniform();
  p.phase = 6.28318530717959 * r.uniform();
  for (int ch = 0; ch < 3; ++ch) p.gamp[ch] = 0.08 + 0.12 * r.uniform();
  return p;
}

void draw_pattern(Rng& rng, const Pattern& p, int64_t channels, int64_t h, int64_t w, float* out /* (C, h, w) */) {
  const double sx = 0.08 * (2 * rng.uniform() - 1), sy = 0.08 * (2 * rng.uniform() - 1);
  const double gain = 0.7 + 0.6 * rng.uniform(), noise = 0.03 + 0.05 * rng.uniform();
  const double ca = std::cos(p.angle), sa = std::sin(p.angle);
  for (int64_t ch = 0; ch < channels; ++ch) {
    const double bg = 0.3 + 0.3 * rng.uniform();
    for (int64_t y = 0; y < h; ++y) {
      for (int64_t x = 0; x < w; ++x) {
        double u = (x + 0.5) / static_cast<double>(w) - sx, v = (y + 0.5) / static_cast<double>(h) - sy;
        double val = p.gamp[ch] * std::sin(6.28318530717959 * p.freq * (ca * u + sa * v) + p.phase);
        for (int k = 0; k < 3; ++k) {
          double du = u - p.bx[k], dv = v - p.by[k];
          val += p.amp[k][ch] * std::exp(-(du * du + dv * dv) / (2 * p.bs[k] * p.bs[k]));
        }
        out[(ch * h + y) * w + x] = static_cast<float>(bg + gain * val + noise * rng.normal());
      }
    }
  }
}

}  // namespace

Dataset make_synthetic_faces(int64_t n, int64_t classes, int64_t channels, int64_t height, int64_t width,
                             uint64_t seed) {
  CNN_CHECK(n >= 0 && classes >= 1 && channels >= 1 && height >= 4 && width >= 4,
            "synthetic data needs n >= 0, classes >= 1, channels >= 1 and at least 4x4 pixels, got n={} "
            "classes={} channels={} {}x{}", n, classes, channels, height, width);
  const std::optional<int64_t> pixels = checked_product({height, width});
  const std::optional<int64_t> total = checked_product({n, channels, height, width});
  if (!pixels || *pixels > kMaxImagePixels || !total || *total > kMaxDataElements) {
    CNN_THROW("synthetic data: {} images of {}x{}x{} exceed the limits of {} pixels per image and {} bytes per split "
              "(kMaxImagePixels, kMaxDataElements in lib/data/data_limits.h)", n, channels, height, width,
              kMaxImagePixels, kMaxDataElements);
  }
  Dataset d;
  d.channels = channels;
  d.height = height;
  d.width = width;
  d.pixels.resize(static_cast<size_t>(*total));
  d.labels.resize(static_cast<size_t>(n));
  const bool faces = classes <= 7 && channels == 1;
  std::vector<Pattern> patterns;
  if (!faces) {
    for (int64_t c = 0; c < classes; ++c) patterns.push_back(make_pattern(classes, channels, c));
  }
  const int64_t sb = d.sample_bytes();
  ParallelErrors errors;
#pragma omp parallel
  {
    std::vector<float> canvas;
    errors.run(-1, [&] { canvas.resize(static_cast<size_t>(sb)); });  // -1: before any image
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; ++i) errors.run(i, [&] {
      const int64_t label = i % classes;
      Rng rng(seed, faces ? kFaceStream : kPatternStream, static_cast<uint64_t>(i) << 32);
      if (faces) {
        draw_face(rng, label, height, width, canvas.data());
      } else {
        draw_pattern(rng, patterns[static_cast<size_t>(label)], channels, height, width, canvas.data());
      }
      uint8_t* dst = d.pixels.data() + i * sb;
      for (int64_t j = 0; j < sb; ++j) dst[j] = static_cast<uint8_t>(std::lround(std::clamp(canvas[j], 0.0f, 1.0f) * 255.0f));
      d.labels[static_cast<size_t>(i)] = static_cast<int32_t>(label);
    });
  }
  errors.rethrow();
  return d;
}

}  // namespace cnn
