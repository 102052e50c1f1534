// Dynamic loss scaling (see loss_scaler.h): the host side, and the CPU arithmetic.
#include "optim/loss_scaler.h"

#include <cmath>
#include <limits>

#include "core/error.h"

namespace cnn {

LossScaler::LossScaler(const LossScaleSpec& spec, const ExecContext& ctx) : m_growth_interval(spec.growth_interval) {
  int e = 0;
  CNN_CHECK(std::frexp(spec.init, &e) == 0.5 && spec.init >= kMinLossScale && spec.init <= kMaxLossScale,
            "loss scale: init {} is not a power of two in [2^-24, 2^24]", spec.init);
  CNN_CHECK(spec.growth_interval >= 1, "loss scale: growth_interval {} is below 1", spec.growth_interval);
  m_state = Tensor::zeros(Shape{int64_t(sizeof(LossScaleState) / sizeof(float))}, ctx.device, "loss scale state");
  m_dev = static_cast<LossScaleState*>(m_state.raw());
  LossScaleState s;
  s.scale = float(spec.init);
  write(ctx, s);
}

void LossScaler::write(const ExecContext& ctx, const LossScaleState& s) {
  m_last = s;
  if (ctx.device == Device::cuda) loss_scale_copy_cuda(ctx, m_dev, &s, false);
  else *m_dev = s;
}

const LossScaleState& LossScaler::read(const ExecContext& ctx) {
  if (ctx.device == Device::cuda) loss_scale_copy_cuda(ctx, &m_last, m_dev, true);
  else m_last = *m_dev;
  return m_last;
}

void LossScaler::scale_gradient(const ExecContext& ctx, float* x, int64_t n) const {
  if (ctx.device == Device::cuda) return loss_scale_multiply_cuda(ctx, x, n, m_dev);
  const float scale = m_dev->scale;
  for (int64_t i = 0; i < n; ++i) x[i] *= scale;
}

void LossScaler::unscale_and_update(const ExecContext& ctx, float* grads, int64_t n, const float* loss) {
  if (ctx.device == Device::cuda) return loss_scale_unscale_cuda(ctx, grads, n, m_dev, m_growth_interval, loss);
  LossScaleState& s = *m_dev;
  const float inv = 1.0f / s.scale;  // exact: a power of two
  bool bad = false;
  for (int64_t i = 0; i < n; ++i) {
    bad |= !std::isfinite(grads[i]);
    grads[i] *= inv;
  }
  s.found_inf = bad ? 1 : 0;
  advance_loss_scale(s, m_growth_interval, loss == nullptr || std::isfinite(*loss));
}

std::map<std::string, std::string> LossScaler::state() const {
  return {{"scale", fmt::format("{:.9g}", m_last.scale)},
          {"clean_steps", std::to_string(m_last.clean_steps)},
          {"skipped_steps", std::to_string(m_last.skipped_steps)}};
}

namespace {

const std::string& field(const std::map<std::string, std::string>& m, const char* key) {
  auto it = m.find(key);
  CNN_CHECK(it != m.end(), "loss scale state: '{}' is missing", key);
  return it->second;
}

// A whole decimal integer in [lo, hi].
int64_t integer_in(const std::map<std::string, std::string>& m, const char* key, int64_t lo, int64_t hi) {
  const std::string& v = field(m, key);
  size_t used = 0;
  long long x = 0;
  try {
    x = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  CNN_CHECK(used == v.size() && !v.empty() && x >= lo && x <= hi,
            "loss scale state: '{}' is '{}', expected an integer in [{}, {}]", key, v, lo, hi);
  return x;
}

}  // namespace

void LossScaler::load_state(const ExecContext& ctx, const std::map<std::string, std::string>& state) {
  for (const auto& [key, value] : state)
    CNN_CHECK(key == "scale" || key == "clean_steps" || key == "skipped_steps",
              "loss scale state: unknown key '{}' (expected scale, clean_steps, skipped_steps)", key);
  const std::string& text = field(state, "scale");
  size_t used = 0;
  double scale = 0;
  try {
    scale = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  int e = 0;
  CNN_CHECK(used == text.size() && std::isfinite(scale) && std::frexp(scale, &e) == 0.5 && scale >= kMinLossScale &&
                scale <= kMaxLossScale,
            "loss scale state: 'scale' is '{}', expected a power of two in [2^-24, 2^24]", text);
  LossScaleState s;
  s.scale = float(scale);
  s.clean_steps = integer_in(state, "clean_steps", 0, m_growth_interval - 1);
  s.skipped_steps = integer_in(state, "skipped_steps", 0, std::numeric_limits<int64_t>::max());
  write(ctx, s);
}

}  // namespace cnn
