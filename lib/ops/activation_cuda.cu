// Pointwise activations on the GPU: one kernel instance per kind and element type (float, or bf16 /
// f16 for BF16 / FP16 training: widened to float, computed in float, rounded once), so the switch of
// activation_math.h folds away; 16-byte accesses (four floats, eight bf16 or f16: elementwise.cuh's
// Lanes) when every pointer read or written is 16-byte aligned (the tail goes element by element),
// plain element accesses otherwise. The layout does not matter: every element is independent.
// Trap: y may alias x and dx may alias dy, so nothing is __restrict__; each thread reads its
// elements before writing them, and backward loads only the operands its kind needs (x or y may be null).
#include "core/cuda_check.h"
#include "ops/activation.h"
#include "ops/activation_math.h"
#include "ops/elementwise.cuh"

namespace cnn {

static constexpr int kThreads = 256;

template <ActivationKind K>
constexpr bool backward_reads_x() {
  return K == ActivationKind::relu || K == ActivationKind::leaky_relu || K == ActivationKind::elu;
}
template <ActivationKind K>
constexpr bool backward_reads_y() {
  return K == ActivationKind::elu || K == ActivationKind::sigmoid || K == ActivationKind::tanh;
}

// The operands of one call, typed: T is float, bf16 or f16.
template <typename T>
struct ActOperands {
  const T* x;   // (n) or null when backward's kind ignores it
  const T* y;   // (n) or null when backward's kind ignores it
  const T* dy;  // (n), backward only
  T* out;       // (n): y forward, dx backward
};

template <typename T, ActivationKind K, bool kVec>
static __global__ void activation_forward_pointwise_kernel(int64_t n, float alpha, ActOperands<T> a) {
  auto f = [alpha](float v) { return activation_forward_value(K, alpha, v); };
  cuda::for_each_element<kVec, cuda::Lanes<T>::kWidth>(
      n, [&](int64_t i) { cuda::store_lanes(a.out, i, cuda::map_lanes(f, cuda::load_lanes(a.x, i))); },
      [&](int64_t i) { cuda::store_one(a.out, i, f(cuda::load_one(a.x, i))); });
}

template <typename T, ActivationKind K, bool kVec>
static __global__ void activation_backward_pointwise_kernel(int64_t n, float alpha, ActOperands<T> a) {
  auto f = [alpha](float xe, float ye, float ge) { return activation_backward_value(K, alpha, xe, ye, ge); };
  auto vec = [&](int64_t i) {
    const cuda::Lanes<T> g = cuda::load_lanes(a.dy, i);
    cuda::Lanes<T> xv{}, yv{};
    if (backward_reads_x<K>()) xv = cuda::load_lanes(a.x, i);
    if (backward_reads_y<K>()) yv = cuda::load_lanes(a.y, i);
    cuda::store_lanes(a.out, i, cuda::map_lanes(f, xv, yv, g));
  };
  auto one = [&](int64_t i) {
    const float xv = backward_reads_x<K>() ? cuda::load_one(a.x, i) : 0.0f;
    const float yv = backward_reads_y<K>() ? cuda::load_one(a.y, i) : 0.0f;
    cuda::store_one(a.out, i, f(xv, yv, cuda::load_one(a.dy, i)));
  };
  cuda::for_each_element<kVec, cuda::Lanes<T>::kWidth>(n, vec, one);
}

// dx = act'(y) dy from the output alone (activation_fusable kinds); dx may alias dy.
template <typename T, ActivationKind K, bool kVec>
static __global__ void activation_backward_from_output_kernel(int64_t n, float alpha, ActOperands<T> a) {
  auto f = [alpha](float ye, float ge) { return activation_backward_from_output(K, alpha, ye, ge); };
  auto vec = [&](int64_t i) {
    cuda::store_lanes(a.out, i, cuda::map_lanes(f, cuda::load_lanes(a.y, i), cuda::load_lanes(a.dy, i)));
  };
  cuda::for_each_element<kVec, cuda::Lanes<T>::kWidth>(
      n, vec, [&](int64_t i) { cuda::store_one(a.out, i, f(cuda::load_one(a.y, i), cuda::load_one(a.dy, i))); });
}

enum class Direction { forward, backward, from_output };

// Whether every pointer the kernel of direction D and kind K touches is 16-byte aligned.
template <Direction D, ActivationKind K, typename T>
static bool vectorisable(const ActOperands<T>& a) {
  const bool reads_x = D == Direction::forward || (D == Direction::backward && backward_reads_x<K>());
  const bool reads_y = D == Direction::from_output || (D == Direction::backward && backward_reads_y<K>());
  return (!reads_x || cuda::aligned16(a.x)) && (!reads_y || cuda::aligned16(a.y)) &&
         (D == Direction::forward || cuda::aligned16(a.dy)) && cuda::aligned16(a.out);
}

template <Direction D, ActivationKind K, typename T>
static void launch(cudaStream_t stream, int64_t n, float alpha, const ActOperands<T>& a) {
  cuda::launch_elementwise<kThreads, cuda::Lanes<T>::kWidth>(vectorisable<D, K>(a), n, [&](unsigned blocks, auto v) {
    constexpr bool kVec = decltype(v)::value;
    if constexpr (D == Direction::forward)
      activation_forward_pointwise_kernel<T, K, kVec><<<blocks, kThreads, 0, stream>>>(n, alpha, a);
    else if constexpr (D == Direction::backward)
      activation_backward_pointwise_kernel<T, K, kVec><<<blocks, kThreads, 0, stream>>>(n, alpha, a);
    else
      activation_backward_from_output_kernel<T, K, kVec><<<blocks, kThreads, 0, stream>>>(n, alpha, a);
  });
}

// The kernel of direction D for p's kind.
template <Direction D, typename T>
static void launch_kind(cudaStream_t stream, const char* what, const ActivationParams& p, int64_t n,
                        const ActOperands<T>& a) {
  switch (p.kind) {
    case ActivationKind::relu: return launch<D, ActivationKind::relu>(stream, n, p.alpha, a);
    case ActivationKind::leaky_relu: return launch<D, ActivationKind::leaky_relu>(stream, n, p.alpha, a);
    case ActivationKind::elu: return launch<D, ActivationKind::elu>(stream, n, p.alpha, a);
    case ActivationKind::sigmoid: return launch<D, ActivationKind::sigmoid>(stream, n, p.alpha, a);
    case ActivationKind::tanh: return launch<D, ActivationKind::tanh>(stream, n, p.alpha, a);
  }
  CNN_THROW("{}: unknown kind {}", what, static_cast<int>(p.kind));
}

static void check_count(const char* what, int64_t n) {
  if (n < 0) CNN_THROW("{}: element count must be non-negative, got {}", what, n);
}

// Checks the call and launches the kernel of direction D on the context's stream.
template <Direction D, typename T>
static void run(const ExecContext& ctx, const char* what, const ActivationParams& p, int64_t n,
                const ActOperands<T>& a) {
  cudaStream_t stream = cuda::stream_of(ctx, what);
  check_count(what, n);
  if (D == Direction::from_output && !activation_fusable(p))
    CNN_THROW("{}: {} with alpha {} needs its input", what, to_string(p.kind), p.alpha);
  if (n == 0) return;
  launch_kind<D>(stream, what, p, n, a);
  CUDA_CHECK_LAUNCH(what);
}

void activation_forward_cuda(const ActivationForward& a) {
  run<Direction::forward>(*a.ctx, "activation forward", a.p, a.n,
                          ActOperands<float>{a.x.f32(), nullptr, nullptr, a.y.f32()});
}
template <typename T>
static void forward_16(const ActivationForward& a) {
  run<Direction::forward>(*a.ctx, "activation forward", a.p, a.n,
                          ActOperands<T>{half16_data<T>(a.x), nullptr, nullptr, half16_data<T>(a.y)});
}
void activation_forward_cuda_bf16(const ActivationForward& a) { forward_16<bf16>(a); }
void activation_forward_cuda_f16(const ActivationForward& a) { forward_16<f16>(a); }

void activation_backward_cuda(const ActivationBackward& a) {
  run<Direction::backward>(*a.ctx, "activation backward", a.p, a.n,
                           ActOperands<float>{a.x.f32(), a.y.f32(), a.dy.f32(), a.dx.f32()});
}
template <typename T>
static void backward_16(const ActivationBackward& a) {
  run<Direction::backward>(
      *a.ctx, "activation backward", a.p, a.n,
      ActOperands<T>{half16_data<T>(a.x), half16_data<T>(a.y), half16_data<T>(a.dy), half16_data<T>(a.dx)});
}
void activation_backward_cuda_bf16(const ActivationBackward& a) { backward_16<bf16>(a); }
void activation_backward_cuda_f16(const ActivationBackward& a) { backward_16<f16>(a); }

void activation_backward_from_output_cuda(const ActivationBackwardFromOutput& a) {
  run<Direction::from_output>(*a.ctx, "activation backward from the output", a.p, a.n,
                              ActOperands<float>{nullptr, a.y.f32(), a.dy.f32(), a.dx.f32()});
}
template <typename T>
static void backward_from_output_16(const ActivationBackwardFromOutput& a) {
  run<Direction::from_output>(*a.ctx, "activation backward from the output", a.p, a.n,
                              ActOperands<T>{nullptr, half16_data<T>(a.y), half16_data<T>(a.dy), half16_data<T>(a.dx)});
}
void activation_backward_from_output_cuda_bf16(const ActivationBackwardFromOutput& a) {
  backward_from_output_16<bf16>(a);
}
void activation_backward_from_output_cuda_f16(const ActivationBackwardFromOutput& a) {
  backward_from_output_16<f16>(a);
}

// A producer's bias and its fused activation (BiasActivationForward): y = act(y + b[c]) in place,
// the channel of element e being (e / inner) % channels. The vector kernel needs inner % 4 == 0,
// so a pack of four shares one channel; Div is FastDiv32 below 2^31 elements, else PlainDiv64.
template <ActivationKind K, bool kVec, typename Div>
static __global__ void bias_activation_forward_kernel(int64_t n, float alpha, const float* __restrict__ b, Div inner,
                                                      Div channels, float* y) {
  using I = typename Div::Index;
  auto add_of = [&](int64_t e) {
    const I plane = inner.div(static_cast<I>(e));
    return __ldg(b + (plane - channels.div(plane) * static_cast<I>(channels.divisor)));
  };
  auto f = [alpha](float v) { return activation_forward_value(K, alpha, v); };
  cuda::for_each_element<kVec>(
      n,
      [&](int64_t i) {
        const float add = add_of(4 * i);
        cuda::store4(y, i, cuda::map4([&](float v) { return f(v + add); }, cuda::load4(y, i)));
      },
      [&](int64_t i) { y[i] = f(y[i] + add_of(i)); });
}

template <ActivationKind K, typename Div>
static void launch_bias_activation(cudaStream_t stream, const BiasActivationForward& a, int64_t n) {
  const bool vec = a.inner % 4 == 0 && cuda::aligned16(a.y.f32());
  const Div inner(a.inner), channels(a.channels);
  cuda::launch_elementwise<kThreads>(vec, n, [&](unsigned blocks, auto v) {
    bias_activation_forward_kernel<K, decltype(v)::value, Div>
        <<<blocks, kThreads, 0, stream>>>(n, a.p.alpha, a.b.f32(), inner, channels, a.y.f32());
  });
}

template <typename Div>
static void launch_bias_activation_kind(cudaStream_t stream, const BiasActivationForward& a, int64_t n) {
  switch (a.p.kind) {
    case ActivationKind::relu: return launch_bias_activation<ActivationKind::relu, Div>(stream, a, n);
    case ActivationKind::leaky_relu: return launch_bias_activation<ActivationKind::leaky_relu, Div>(stream, a, n);
    case ActivationKind::elu: return launch_bias_activation<ActivationKind::elu, Div>(stream, a, n);
    case ActivationKind::sigmoid: return launch_bias_activation<ActivationKind::sigmoid, Div>(stream, a, n);
    case ActivationKind::tanh: return launch_bias_activation<ActivationKind::tanh, Div>(stream, a, n);
  }
  CNN_THROW("bias and activation forward: unknown kind {}", static_cast<int>(a.p.kind));
}

void bias_activation_forward_cuda(const BiasActivationForward& a) {
  const char* what = "bias and activation forward";
  check_bias_activation(a);
  const int64_t n = a.outer * a.channels * a.inner;
  if (a.b.null()) {  // the activation alone, in place
    run<Direction::forward>(*a.ctx, what, a.p, n, ActOperands<float>{a.y.f32(), nullptr, nullptr, a.y.f32()});
    return;
  }
  cudaStream_t stream = cuda::stream_of(*a.ctx, what);
  if (n == 0) return;
  if (cuda::fits_int32(n))
    launch_bias_activation_kind<cuda::FastDiv32>(stream, a, n);
  else
    launch_bias_activation_kind<cuda::PlainDiv64>(stream, a, n);
  CUDA_CHECK_LAUNCH(what);
}

}  // namespace cnn
