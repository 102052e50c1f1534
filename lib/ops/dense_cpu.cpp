// Dense (fully connected) on the CPU: naive reference loops (float and double, the oracle) and the
// fast path through OpenMP-split SGEMM. Weights are PyTorch's (K, C), so forward multiplies by w^T.
// The bf16 rows (the f16 rows too) are the emulation of the cuda bf16 and f16 rows: the same SGEMMs on widened operands.
// Trap: db is written whenever it is non-null, even if the shape has no bias (it is then the
// gradient a bias would get); forward adds b only when sh.has_bias.
#include "ops/dense.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "ops/blas_cpu.h"
#include "ops/convert.h"

namespace cnn {

static void check_shape(const DenseShape& sh) {
  CNN_CHECK(sh.N >= 1 && sh.C >= 1 && sh.K >= 1, "dense: sizes must be positive, got N={}, C={}, K={}", sh.N, sh.C,
            sh.K);
}

template <typename T>
void dense_forward_reference(const ExecContext& ctx, const DenseShape& sh, const T* x, const T* w, const T* b, T* y) {
  check_shape(sh);
  CNN_CHECK(!sh.has_bias || b, "dense: the shape has a bias but b is null");
  for (int64_t n = 0; n < sh.N; ++n)
    for (int64_t k = 0; k < sh.K; ++k) {
      T acc = sh.has_bias ? b[k] : T(0);
      for (int64_t c = 0; c < sh.C; ++c) acc += x[n * sh.C + c] * w[k * sh.C + c];
      y[n * sh.K + k] = acc;
    }
}

template <typename T>
void dense_backward_reference(const ExecContext& ctx, const DenseShape& sh, const T* x, const T* w, const T* dy, T* dx,
                              T* dw, T* db) {
  check_shape(sh);
  if (dx) std::fill(dx, dx + sh.N * sh.C, T(0));
  if (dw) std::fill(dw, dw + sh.K * sh.C, T(0));
  if (db) std::fill(db, db + sh.K, T(0));
  for (int64_t n = 0; n < sh.N; ++n)
    for (int64_t k = 0; k < sh.K; ++k) {
      const T g = dy[n * sh.K + k];
      if (db) db[k] += g;
      for (int64_t c = 0; c < sh.C; ++c) {
        if (dx) dx[n * sh.C + c] += g * w[k * sh.C + c];
        if (dw) dw[k * sh.C + c] += g * x[n * sh.C + c];
      }
    }
}

template void dense_forward_reference<float>(const ExecContext&, const DenseShape&, const float*, const float*,
                                             const float*, float*);
template void dense_forward_reference<double>(const ExecContext&, const DenseShape&, const double*, const double*,
                                              const double*, double*);
template void dense_backward_reference<float>(const ExecContext&, const DenseShape&, const float*, const float*,
                                              const float*, float*, float*, float*);
template void dense_backward_reference<double>(const ExecContext&, const DenseShape&, const double*, const double*,
                                               const double*, double*, double*, double*);

// The f32 row's arithmetic over plain pointers, shared by the f32 row and the bf16 emulation.
static void forward_f32(const ExecContext& ctx, const DenseShape& sh, const float* x, const float* w, const float* b,
                        float* y) {
  check_shape(sh);
  CNN_CHECK(!sh.has_bias || b, "dense: the shape has a bias but b is null");
  float beta = 0.0f;
  if (sh.has_bias) {
    for (int64_t n = 0; n < sh.N; ++n) std::copy(b, b + sh.K, y + n * sh.K);
    beta = 1.0f;
  }
  // y (N, K) = x (N, C) * w^T (C, K) [+ y]
  sgemm_parallel(ctx.threads(), false, true, sh.N, sh.K, sh.C, 1.0f, x, sh.C, w, sh.C, beta, y, sh.K);
}

static void backward_f32(const ExecContext& ctx, const DenseShape& sh, const float* x, const float* w,
                         const float* dy, float* dx, float* dw, float* db) {
  const int threads = ctx.threads();
  check_shape(sh);
  // dx (N, C) = dy (N, K) * w (K, C)
  if (dx) sgemm_parallel(threads, false, false, sh.N, sh.C, sh.K, 1.0f, dy, sh.K, w, sh.C, 0.0f, dx, sh.C);
  // dw (K, C) = dy^T (K, N) * x (N, C)
  if (dw) sgemm_parallel(threads, true, false, sh.K, sh.C, sh.N, 1.0f, dy, sh.K, x, sh.C, 0.0f, dw, sh.C);
  if (db) {
    // Column sums of dy (N, K), rows added in order; double so long batches lose no bits.
    std::vector<double> acc(static_cast<size_t>(sh.K), 0.0);
    for (int64_t n = 0; n < sh.N; ++n)
      for (int64_t k = 0; k < sh.K; ++k) acc[k] += dy[n * sh.K + k];
    for (int64_t k = 0; k < sh.K; ++k) db[k] = static_cast<float>(acc[k]);
  }
}

void dense_forward_cpu(const DenseForward& a) { forward_f32(*a.ctx, a.sh, a.x.f32(), a.w.f32(), a.b.f32(), a.y.f32()); }

void dense_backward_cpu(const DenseBackward& a) {
  backward_f32(*a.ctx, a.sh, a.x.f32(), a.w.f32(), a.dy.f32(), a.dx.f32(), a.dw.f32(), a.db.f32());
}

// The BF16 and F16 emulation (dense.h): operands widened, w rounded to the bf16 or f16 values the
// cuda row casts it to (t: the activations' dtype), the f32 arithmetic, each output rounded once.
static std::vector<float> rounded_weights(const DenseShape& sh, const float* w, DType t) {
  std::vector<float> r(w, w + sh.K * sh.C);
  for (float& v : r) v = round_to(t, v);
  return r;
}

void dense_forward_cpu_bf16(const DenseForward& a) {
  const DenseShape& sh = a.sh;
  check_shape(sh);
  const std::vector<float> x = widen(a.x, ActDims{sh.N, sh.C}),
                           w = rounded_weights(sh, a.w.f32(), a.x.dtype());
  std::vector<float> y(size_t(sh.N * sh.K));
  forward_f32(*a.ctx, sh, x.data(), w.data(), a.b.f32(), y.data());
  narrow(y.data(), ActDims{sh.N, sh.K}, a.y);
}

void dense_backward_cpu_bf16(const DenseBackward& a) {
  const DenseShape& sh = a.sh;
  check_shape(sh);
  const bool dx16 = !a.dx.null();
  float *dw = a.dw.f32(), *db = a.db.f32();
  const std::vector<float> dy = widen(a.dy, ActDims{sh.N, sh.K});
  const std::vector<float> x = dw ? widen(a.x, ActDims{sh.N, sh.C}) : std::vector<float>();
  const std::vector<float> w = dx16 ? rounded_weights(sh, a.w.f32(), a.dy.dtype()) : std::vector<float>();
  std::vector<float> dx(dx16 ? size_t(sh.N * sh.C) : 0);
  backward_f32(*a.ctx, sh, dw ? x.data() : nullptr, dx16 ? w.data() : nullptr, dy.data(), dx16 ? dx.data() : nullptr,
               dw, db);
  if (dx16) narrow(dx.data(), ActDims{sh.N, sh.C}, a.dx);
}

}  // namespace cnn
