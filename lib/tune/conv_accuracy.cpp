// Convolution accuracy against a trusted reference (see conv_accuracy.h).
#include "tune/conv_accuracy.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/bf16.h"
#include "core/error.h"
#include "ops/conv2d.h"
#include "ops/convert.h"

namespace cnn {

namespace {

ActDims dims_of(const Shape& s) { return ActDims{s[0], s[1], s[2], s[3]}; }

// A host copy of an activation, NCHW floats (an f32cl, bf16 or f16 one widened from channels-last).
std::vector<float> download_nchw(const Tensor& t) {
  if (t.dtype() == DType::f32) return probe_download(t);
  std::vector<char> h(t.bytes());  // the stored elements, whatever their width
  device_memcpy(h.data(), Device::cpu, t.raw(), t.device(), t.bytes());
  return widen(ConstView(h.data(), t.dtype()), dims_of(t.shape()));
}

}  // namespace

ConvProbe::ConvProbe(const ExecContext& ctx, const Conv2dShape& sh, uint64_t seed, DType dtype)
    : m_ctx(ctx), m_sh(sh), m_dtype(dtype) {
  CNN_CHECK(dtype == DType::f32 || dtype == DType::f32cl || dtype == DType::bf16 || dtype == DType::f16,
            "conv accuracy: no probe for activations of dtype {}", to_string(dtype));
  const Device dev = ctx.device;
  const int threads = ctx.threads();
  const int64_t fan_in = sh.C / sh.groups * sh.R * sh.S;
  // Activations exact in the candidates' dtype, so the reference reads what they read.
  auto exact = [dtype, threads](std::vector<float> v) {
    if (!is_16bit(dtype)) return v;
    float* p = v.data();
    const int64_t n = int64_t(v.size());
#pragma omp parallel for schedule(static) num_threads(threads) if (n >= (int64_t{1} << 15))
    for (int64_t i = 0; i < n; ++i) p[i] = round_to(dtype, p[i]);
    return v;
  };
  // x: on a GPU under f32 made there (set 1 from the same values, through max(0, .)); else on the
  // host, where the float64 reference (CPU) or the rounding and channels-last copies (bf16, f16)
  // need them.
  if (!device_inputs()) {
    m_hxs[0] = exact(probe_normals(sh.N * sh.C * sh.H * sh.W, 1.0f, seed * 4 + 0, threads));
    m_hxs[1].resize(m_hxs[0].size());
    const float* x0 = m_hxs[0].data();
    float* x1 = m_hxs[1].data();
    const int64_t n = int64_t(m_hxs[0].size());
#pragma omp parallel for schedule(static) num_threads(threads) if (n >= (int64_t{1} << 15))
    for (int64_t i = 0; i < n; ++i) x1[i] = std::max(x0[i], 0.0f);
  }
  m_hw = probe_normals(sh.weight_numel(), float(std::sqrt(2.0 / double(std::max<int64_t>(fan_in, 1)))), seed * 4 + 1,
                       threads);
  m_hb = probe_normals(sh.K, 1.0f, seed * 4 + 2, threads);
  m_hdys[0] = exact(probe_normals(sh.N * sh.K * sh.P * sh.Q, 1.0f, seed * 4 + 3, threads));
  m_ref_act = make_activations(DType::f32, seed * 4 + 0);
  m_cand_act = dtype == DType::f32 ? m_ref_act : make_activations(dtype, seed * 4 + 0);
  // On a GPU the reference runs on the uploaded copies: the host ones of x would only take memory.
  if (dev != Device::cpu)
    for (std::vector<float>& x : m_hxs) std::vector<float>().swap(x);
  m_w = probe_upload(m_hw, Shape{sh.weight_numel()}, dev);
  m_b = probe_upload(m_hb, Shape{sh.K}, dev);
  m_dw = Tensor::empty(Shape{sh.weight_numel()}, dev, "conv accuracy dw");
  m_db = Tensor::empty(Shape{sh.K}, dev, "conv accuracy db");
}

Tensor ConvProbe::upload(const std::vector<float>& v, const Shape& shape, DType t) const {
  if (t == DType::f32) return probe_upload(v, shape, m_ctx.device);
  Tensor out = Tensor::empty(shape, m_ctx.device, "accuracy probe operand", t);
  std::vector<char> h(out.bytes());
  narrow(v.data(), dims_of(shape), View(h.data(), t));  // exact: the values are t's already
  device_memcpy(out.raw(), m_ctx.device, h.data(), Device::cpu, out.bytes());
  return out;
}

ConvProbe::Activations ConvProbe::make_activations(DType t, uint64_t x_seed) const {
  const Shape in{m_sh.N, m_sh.C, m_sh.H, m_sh.W}, out{m_sh.N, m_sh.K, m_sh.P, m_sh.Q};
  Activations a;
  for (int i = 0; i < kInputSets; ++i) {
    if (!m_hxs[i].empty()) {
      a.xs[i] = upload(m_hxs[i], in, t);
      continue;
    }
    ProbeFill x;  // device_inputs(): the host path's values, made on the device
    x.seed = x_seed;
    x.relu = i == 1;
    a.xs[i] = probe_tensor(m_ctx, in, x);
  }
  a.dys[0] = upload(m_hdys[0], out, t);  // set 1's when first needed (make_projected_dy)
  a.y = Tensor::empty(out, m_ctx.device, "conv accuracy y", t);
  a.dx = Tensor::empty(in, m_ctx.device, "conv accuracy dx", t);
  return a;
}

void ConvProbe::ensure_dy(ConvDir d) {
  if (d != ConvDir::forward && m_set == 1 && !m_dy1_made) make_projected_dy();
}

ConvOperands ConvProbe::operands_of(Activations& a, ConvDir d) {
  ConvOperands op;
  op.math = m_math;
  if (d == ConvDir::forward)
    op.x = a.xs[m_set].view(), op.w = m_w.view(), op.b = m_sh.has_bias ? m_b.view() : View(nullptr), op.y = a.y.view();
  if (d == ConvDir::backward_data) op.w = m_w.view(), op.dy = a.dys[m_set].view(), op.dx = a.dx.view();
  if (d == ConvDir::backward_filter)
    op.x = a.xs[m_set].view(), op.dy = a.dys[m_set].view(), op.dw = m_dw.view(),
    op.db = m_sh.has_bias ? m_db.view() : View(nullptr);
  return op;
}

ConvOperands ConvProbe::operands(ConvDir d) {
  ensure_dy(d);
  return operands_of(m_cand_act, d);
}

void ConvProbe::poison_of(Activations& a, ConvDir d) {
  if (d == ConvDir::forward) probe_poison(m_ctx, a.y);
  if (d == ConvDir::backward_data) probe_poison(m_ctx, a.dx);
  if (d == ConvDir::backward_filter) {
    probe_poison(m_ctx, m_dw);
    if (m_sh.has_bias) probe_poison(m_ctx, m_db);
  }
}

void ConvProbe::poison(ConvDir d) { poison_of(m_cand_act, d); }

std::vector<float> ConvProbe::output_of(const Activations& a, ConvDir d) const {
  if (d == ConvDir::forward) return download_nchw(a.y);
  if (d == ConvDir::backward_data) return download_nchw(a.dx);
  std::vector<float> v = probe_download(m_dw);
  if (m_sh.has_bias) {
    const std::vector<float> b = probe_download(m_db);
    v.insert(v.end(), b.begin(), b.end());
  }
  return v;
}

std::vector<float> ConvProbe::output(ConvDir d) const { return output_of(m_cand_act, d); }

std::optional<std::string> conv_reference_name(const ExecContext& ctx, const Conv2dShape& sh, ConvDir d) {
  if (ctx.device == Device::cpu) return std::string("cpu:reference_fp64");
  const char* forward[] = {"cuda:implicit_gemm", "cuda:direct", "cudnn:implicit_gemm"};
  const char* backward[] = {"cuda:implicit_gemm", "cuda:direct", "cudnn:algo_1"};
  for (const char* name : d == ConvDir::forward ? forward : backward)
    for (const ConvAlgo& a : conv2d_algos(d))
      if (a.dtype == DType::f32 && a.name == name && a.can_implement(ctx, sh)) return a.name;
  return std::nullopt;
}

// Outputs compared on the device: y and dx of an f32 probe on a GPU (dw and db are small).
bool ConvProbe::device_compare(ConvDir d) const {
  return m_ctx.device == Device::cuda && m_dtype == DType::f32 && d != ConvDir::backward_filter;
}

const Tensor& ConvProbe::reference_tensor(ConvDir d) {
  std::optional<Tensor>& slot = m_ref_dev[m_set][size_t(d)];
  if (slot) return *slot;
  ensure_dy(d);
  const std::optional<std::string> name = reference_name(d);
  CNN_CHECK(name.has_value(), "no reference {} convolution can run {}", to_string(d), m_sh.to_string());
  const ConvAlgo& a = conv2d_algo(d, *name, DType::f32);
  poison_of(m_ref_act, d);
  ConvOperands op = operands_of(m_ref_act, d);
  op.math = MathMode::fp32;  // the reference is plain FP32 whatever the candidates may do
  a.run(m_ctx, m_sh, op);
  slot = (d == ConvDir::forward ? m_ref_act.y : m_ref_act.dx).clone();
  return *slot;
}

const std::vector<float>& ConvProbe::reference(ConvDir d) {
  std::optional<std::vector<float>>& slot = m_ref[m_set][size_t(d)];
  if (slot) return *slot;
  if (device_compare(d)) {
    slot = probe_download(reference_tensor(d));
    return *slot;
  }
  ensure_dy(d);
  const std::optional<std::string> name = reference_name(d);
  CNN_CHECK(name.has_value(), "no reference {} convolution can run {}", to_string(d), m_sh.to_string());
  if (m_ctx.device == Device::cpu) {
    const Conv2dShape& sh = m_sh;
    auto dbl = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
    const std::vector<double> x = dbl(m_hxs[m_set]), w = dbl(m_hw), b = dbl(m_hb), dy = dbl(m_hdys[m_set]);
    std::vector<double> out;
    if (d == ConvDir::forward) {
      out.resize(size_t(sh.N * sh.K * sh.P * sh.Q));
      conv2d_forward_reference<double>(m_ctx, sh, x.data(), w.data(), sh.has_bias ? b.data() : nullptr, out.data());
    } else if (d == ConvDir::backward_data) {
      out.resize(size_t(sh.N * sh.C * sh.H * sh.W));
      conv2d_backward_reference<double>(m_ctx, sh, x.data(), w.data(), dy.data(), out.data(), nullptr, nullptr);
    } else {
      out.resize(size_t(sh.weight_numel() + (sh.has_bias ? sh.K : 0)));
      conv2d_backward_reference<double>(m_ctx, sh, x.data(), w.data(), dy.data(), nullptr, out.data(),
                                        sh.has_bias ? out.data() + sh.weight_numel() : nullptr);
    }
    slot = std::vector<float>(out.begin(), out.end());
  } else {
    const ConvAlgo& a = conv2d_algo(d, *name, DType::f32);
    poison_of(m_ref_act, d);
    ConvOperands op = operands_of(m_ref_act, d);
    op.math = MathMode::fp32;  // the reference is plain FP32 whatever the candidates may do
    a.run(m_ctx, m_sh, op);
    slot = output_of(m_ref_act, d);
  }
  return *slot;
}

double ConvProbe::output_error(ConvDir d) {
  if (device_compare(d)) {
    const Tensor& out = d == ConvDir::forward ? m_cand_act.y : m_cand_act.dx;
    if (m_ref_dev[m_set][size_t(d)]) return relative_l2(l2_sums(m_ctx, out, *m_ref_dev[m_set][size_t(d)]));
    const Tensor got = out.clone();  // the reference below writes into the same tensors
    return relative_l2(l2_sums(m_ctx, got, reference_tensor(d)));
  }
  std::vector<float> got = output(d);  // before reference(), which may overwrite the outputs
  return relative_l2(got, reference(d), m_ctx.threads());
}

// dy of set 1: per output channel k, g = N(0,1) values (set 0's dy) minus their mean and minus
// yhat * mean(g * yhat), yhat the normalised forward output of set 1 over (n, p, q); then * 2^-17.
// Called with set 1 selected (ensure_dy).
void ConvProbe::make_projected_dy() {
  const std::vector<float>& y = reference(ConvDir::forward);
  // An fp16 run's gradients arrive multiplied by its loss scale (2^16 by default): the same small
  // gradient there is 2^-1, inside f16's normal range, where 2^-17 would be subnormal.
  // A power of two: the product is exact (std::ldexp is a library call, 2.5x slower here).
  const double dy_scale = std::ldexp(1.0, m_dtype == DType::f16 ? -1 : -17);
  const int64_t N = m_sh.N, K = m_sh.K, PQ = m_sh.P * m_sh.Q;
  const double count = double(N * PQ);
  std::vector<float> g = m_hdys[0];
  float* gp = g.data();
  const float* yp = y.data();
  const DType dtype = m_dtype;
  // One channel a thread, each summed in (n, p, q) order: the same values on any thread count.
#pragma omp parallel for schedule(dynamic, 1) num_threads(std::max(1, std::min<int>(m_ctx.threads(), int(K))))
  for (int64_t k = 0; k < K; ++k) {
    double my = 0, mg = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = (n * K + k) * PQ, e = i + PQ; i < e; ++i) my += yp[i], mg += gp[i];
    my /= count, mg /= count;
    double var = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = (n * K + k) * PQ, e = i + PQ; i < e; ++i) var += (yp[i] - my) * (yp[i] - my);
    const double inv_std = 1.0 / std::sqrt(var / count + 1e-5);
    double mgy = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = (n * K + k) * PQ, e = i + PQ; i < e; ++i) mgy += (gp[i] - mg) * (yp[i] - my) * inv_std;
    mgy /= count;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = (n * K + k) * PQ, e = i + PQ; i < e; ++i) {
        const double yhat = (yp[i] - my) * inv_std;
        gp[i] = round_to(dtype, float((double(gp[i]) - mg - yhat * mgy) * dy_scale));
      }
  }
  const Shape shape{m_sh.N, m_sh.K, m_sh.P, m_sh.Q};
  m_ref_act.dys[1] = upload(g, shape, DType::f32);
  m_cand_act.dys[1] = m_dtype == DType::f32 ? m_ref_act.dys[1] : upload(g, shape, m_dtype);
  m_dy1_made = true;
  // The CPU reference reads the host copy; on a GPU it would only take memory.
  if (m_ctx.device == Device::cpu) m_hdys[1] = std::move(g);
}

void ConvProbe::use_input_set(int set) {
  CNN_CHECK(set >= 0 && set < kInputSets, "conv accuracy: input set {} (there are {})", set, kInputSets);
  m_set = set;
}

// Runs `a` on input sets [first, last) and returns the largest error (NaN as soon as one is NaN).
double ConvProbe::errors_on_sets(const ConvAlgo& a, int first, int last) {
  double worst = 0;
  try {
    for (int set = first; set < last; ++set) {
      use_input_set(set);
      if (device_compare(a.dir)) reference_tensor(a.dir);
      else reference(a.dir);
      poison(a.dir);
      a.run(m_ctx, m_sh, operands(a.dir));
      const double e = output_error(a.dir);
      if (std::isnan(e)) {
        worst = e;
        break;
      }
      worst = std::max(worst, e);
    }
  } catch (...) {
    use_input_set(0);
    throw;
  }
  use_input_set(0);
  return worst;
}

double ConvProbe::run_and_compare(const ConvAlgo& a) {
  return errors_on_sets(a, 0, kInputSets);
}

double ConvProbe::worst_error(const ConvAlgo& a) {
  use_input_set(0);
  const double e = output_error(a.dir);
  if (std::isnan(e)) return e;
  return std::max(e, errors_on_sets(a, 1, kInputSets));
}

}  // namespace cnn
