// Activations on the CPU: the reference goes element by element through the kind switch; the
// fast path hoists the switch out of an OpenMP simd loop. Both share activation_math.h.
// The bf16 rows, which are the f16 rows too (the CPU emulation, ops/dispatch.h), widen their
// operands, run the f32 row and round each output once; element-wise, so the storage order (channels-last) needs no permute.
// Trap: y may alias x and dx may alias dy, so every loop reads index i before writing index i.
#include "core/error.h"
#include "ops/activation.h"
#include "ops/activation_math.h"
#include "ops/convert.h"

namespace cnn {

// Below this many elements a parallel region costs more than it saves.
static constexpr int64_t kParallelMin = int64_t{1} << 15;

const char* to_string(ActivationKind k) {
  switch (k) {
    case ActivationKind::relu: return "relu";
    case ActivationKind::leaky_relu: return "leaky_relu";
    case ActivationKind::elu: return "elu";
    case ActivationKind::sigmoid: return "sigmoid";
    case ActivationKind::tanh: return "tanh";
  }
  return "unknown";
}

static void check_count(const char* what, int64_t n) {
  if (n < 0) CNN_THROW("{}: element count must be non-negative, got {}", what, n);
}

template <typename T>
void activation_forward_reference(const ExecContext& ctx, const ActivationParams& p, int64_t n, const T* x,
                                  T* y) {  // x, y (n)
  check_count("activation forward", n);
  const T alpha = static_cast<T>(p.alpha);
  for (int64_t i = 0; i < n; ++i) y[i] = activation_forward_value(p.kind, alpha, x[i]);
}

template <typename T>
void activation_backward_reference(const ExecContext& ctx, const ActivationParams& p, int64_t n,
                                   const T* x,   // (n)
                                   const T* y,   // (n)
                                   const T* dy,  // (n)
                                   T* dx) {      // (n)
  check_count("activation backward", n);
  const T alpha = static_cast<T>(p.alpha);
  for (int64_t i = 0; i < n; ++i) dx[i] = activation_backward_value(p.kind, alpha, x[i], y[i], dy[i]);
}

template void activation_forward_reference<float>(const ExecContext&, const ActivationParams&, int64_t,
                                                  const float*, float*);
template void activation_forward_reference<double>(const ExecContext&, const ActivationParams&, int64_t,
                                                   const double*, double*);
template void activation_backward_reference<float>(const ExecContext&, const ActivationParams&, int64_t,
                                                   const float*, const float*, const float*, float*);
template void activation_backward_reference<double>(const ExecContext&, const ActivationParams&, int64_t,
                                                    const double*, const double*, const double*, double*);

// f(i) for i in [0, n), threaded and vectorised; f must touch only index i.
template <typename F>
static void parallel_pointwise(const ExecContext& ctx, int64_t n, F f) {
  const int threads = ctx.threads();
#pragma omp parallel for simd num_threads(threads) if (n >= kParallelMin) schedule(static)
  for (int64_t i = 0; i < n; ++i) f(i);
}

void activation_forward_cpu(const ActivationForward& args) {
  const ExecContext& ctx = *args.ctx;
  const int64_t n = args.n;
  const float* x = args.x.f32();
  float* y = args.y.f32();
  check_count("activation forward", n);
  const float a = args.p.alpha;
  switch (args.p.kind) {
    case ActivationKind::relu:
      parallel_pointwise(ctx, n, [=](int64_t i) { y[i] = relu_forward(x[i]); });
      return;
    case ActivationKind::leaky_relu:
      parallel_pointwise(ctx, n, [=](int64_t i) { y[i] = leaky_relu_forward(x[i], a); });
      return;
    case ActivationKind::elu:
      parallel_pointwise(ctx, n, [=](int64_t i) { y[i] = elu_forward(x[i], a); });
      return;
    case ActivationKind::sigmoid:
      parallel_pointwise(ctx, n, [=](int64_t i) { y[i] = sigmoid_forward(x[i]); });
      return;
    case ActivationKind::tanh:
      parallel_pointwise(ctx, n, [=](int64_t i) { y[i] = tanh_forward(x[i]); });
      return;
  }
  CNN_THROW("activation forward: unknown kind {}", static_cast<int>(args.p.kind));
}

void activation_backward_cpu(const ActivationBackward& args) {
  const ExecContext& ctx = *args.ctx;
  const int64_t n = args.n;
  const float *x = args.x.f32(), *y = args.y.f32(), *dy = args.dy.f32();
  float* dx = args.dx.f32();
  check_count("activation backward", n);
  const float a = args.p.alpha;
  switch (args.p.kind) {
    case ActivationKind::relu:
      parallel_pointwise(ctx, n, [=](int64_t i) { dx[i] = relu_backward(x[i], dy[i]); });
      return;
    case ActivationKind::leaky_relu:
      parallel_pointwise(ctx, n, [=](int64_t i) { dx[i] = leaky_relu_backward(x[i], a, dy[i]); });
      return;
    case ActivationKind::elu:
      parallel_pointwise(ctx, n, [=](int64_t i) { dx[i] = elu_backward(x[i], y[i], a, dy[i]); });
      return;
    case ActivationKind::sigmoid:
      parallel_pointwise(ctx, n, [=](int64_t i) { dx[i] = sigmoid_backward(y[i], dy[i]); });
      return;
    case ActivationKind::tanh:
      parallel_pointwise(ctx, n, [=](int64_t i) { dx[i] = tanh_backward(y[i], dy[i]); });
      return;
  }
  CNN_THROW("activation backward: unknown kind {}", static_cast<int>(args.p.kind));
}

void activation_backward_from_output_cpu(const ActivationBackwardFromOutput& args) {
  const ActivationParams& p = args.p;
  const int64_t n = args.n;
  const float *y = args.y.f32(), *dy = args.dy.f32();
  float* dx = args.dx.f32();
  check_count("activation backward", n);
  CNN_CHECK(activation_fusable(p), "activation backward from the output: {} with alpha {} needs its input",
            to_string(p.kind), p.alpha);
  const int threads = args.ctx->threads();
  const ActivationKind kind = p.kind;
  const float alpha = p.alpha;
#pragma omp parallel for simd num_threads(threads) if (n >= kParallelMin) schedule(static)
  for (int64_t i = 0; i < n; ++i) dx[i] = activation_backward_from_output(kind, alpha, y[i], dy[i]);
}

void check_bias_activation(const BiasActivationForward& a) {
  if (a.outer < 0 || a.channels < 0 || a.inner < 0)
    CNN_THROW("bias and activation forward: dimensions must be non-negative, got {} x {} x {}", a.outer, a.channels,
              a.inner);
}

// One plane (one channel of one image) at a time: its bias is read once; planes are threaded, the
// kind is a template argument so each plane's loop vectorises without a switch per element.
template <ActivationKind K>
static void bias_activation_planes(const BiasActivationForward& args) {
  const int64_t planes = args.outer * args.channels, inner = args.inner, channels = args.channels;
  const float* b = args.b.f32();
  float* y = args.y.f32();
  const float alpha = args.p.alpha;
  const int threads = args.ctx->threads();
#pragma omp parallel for num_threads(threads) if (planes * inner >= kParallelMin) schedule(static)
  for (int64_t p = 0; p < planes; ++p) {
    float* row = y + p * inner;
    if (b) {  // no add without a bias: -0 + 0 would turn tanh(-0) into +0
      const float add = b[p % channels];
#pragma omp simd
      for (int64_t i = 0; i < inner; ++i) row[i] = activation_forward_value(K, alpha, row[i] + add);
    } else {
#pragma omp simd
      for (int64_t i = 0; i < inner; ++i) row[i] = activation_forward_value(K, alpha, row[i]);
    }
  }
}

void bias_activation_forward_cpu(const BiasActivationForward& args) {
  check_bias_activation(args);
  switch (args.p.kind) {
    case ActivationKind::relu: return bias_activation_planes<ActivationKind::relu>(args);
    case ActivationKind::leaky_relu: return bias_activation_planes<ActivationKind::leaky_relu>(args);
    case ActivationKind::elu: return bias_activation_planes<ActivationKind::elu>(args);
    case ActivationKind::sigmoid: return bias_activation_planes<ActivationKind::sigmoid>(args);
    case ActivationKind::tanh: return bias_activation_planes<ActivationKind::tanh>(args);
  }
  CNN_THROW("bias and activation forward: unknown kind {}", static_cast<int>(args.p.kind));
}

// n 16-bit elements of v as floats, in storage order; empty for a null view (an operand the kind ignores).
static std::vector<float> widened(ConstView v, int64_t n) { return widen(v, ActDims{n, 1}); }
static const float* or_null(const std::vector<float>& v) { return v.empty() ? nullptr : v.data(); }

void activation_forward_cpu_bf16(const ActivationForward& a) {
  check_count("activation forward", a.n);
  const std::vector<float> x = widened(a.x, a.n);
  std::vector<float> y(size_t(a.n));
  activation_forward_cpu(ActivationForward{a.ctx, a.p, a.n, x.data(), y.data()});
  narrow(y.data(), ActDims{a.n, 1}, a.y);
}

void activation_backward_cpu_bf16(const ActivationBackward& a) {
  check_count("activation backward", a.n);
  const std::vector<float> x = widened(a.x, a.n), y = widened(a.y, a.n), dy = widened(a.dy, a.n);
  std::vector<float> dx(size_t(a.n));
  activation_backward_cpu(ActivationBackward{a.ctx, a.p, a.n, or_null(x), or_null(y), dy.data(), dx.data()});
  narrow(dx.data(), ActDims{a.n, 1}, a.dx);
}

void activation_backward_from_output_cpu_bf16(const ActivationBackwardFromOutput& a) {
  check_count("activation backward", a.n);
  const std::vector<float> y = widened(a.y, a.n), dy = widened(a.dy, a.n);
  std::vector<float> dx(size_t(a.n));
  activation_backward_from_output_cpu(ActivationBackwardFromOutput{a.ctx, a.p, a.n, y.data(), dy.data(), dx.data()});
  narrow(dx.data(), ActDims{a.n, 1}, a.dx);
}

}  // namespace cnn
