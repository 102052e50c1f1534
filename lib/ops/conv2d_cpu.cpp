// Conv2d on the CPU: shape validation, the naive reference (the oracle for every backend) and the
// fast path (per-image im2col + single-threaded SGEMM per group, OpenMP over images; with fewer
// images than threads the forward's SGEMMs are split over the threads instead).
// Trap: dw is summed over images in per-thread slices that are then added in slice order, so the
// result depends on ctx.threads() (deterministic for a given count, not across counts). db is
// written whenever it is non-null, even without a bias (it is the gradient a bias would get).
// The bf16 emulation at the end runs this fast path on widened copies (allocated per call).
#include "ops/conv2d.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/checked.h"
#include "core/error.h"
#include "core/parallel_errors.h"
#include "ops/blas_cpu.h"
#include "ops/convert.h"
#include "ops/im2col.h"

namespace cnn {

Conv2dShape Conv2dShape::make(int64_t N, int64_t C, int64_t H, int64_t W, int64_t K, int64_t R, int64_t S,
                              int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w, int64_t dilation_h,
                              int64_t dilation_w, int64_t groups, bool has_bias) {
  if (N < 1 || C < 1 || H < 1 || W < 1 || K < 1 || R < 1 || S < 1)
    CNN_THROW("conv2d: sizes must be positive, got input (N={}, C={}, H={}, W={}) and filters (K={}, R={}, S={})", N, C,
              H, W, K, R, S);
  if (stride_h < 1 || stride_w < 1) CNN_THROW("conv2d: stride must be positive, got {}x{}", stride_h, stride_w);
  if (dilation_h < 1 || dilation_w < 1)
    CNN_THROW("conv2d: dilation must be positive, got {}x{}", dilation_h, dilation_w);
  if (pad_h < 0 || pad_w < 0) CNN_THROW("conv2d: padding must not be negative, got {}x{}", pad_h, pad_w);
  if (groups < 1) CNN_THROW("conv2d: groups must be positive, got {}", groups);
  if (C % groups != 0) CNN_THROW("conv2d: input channels C={} are not divisible by groups={}", C, groups);
  if (K % groups != 0) CNN_THROW("conv2d: output channels K={} are not divisible by groups={}", K, groups);
  Conv2dShape sh;
  sh.N = N, sh.C = C, sh.H = H, sh.W = W, sh.K = K, sh.R = R, sh.S = S;
  sh.stride_h = narrow_to_int(stride_h, "conv2d: stride"), sh.stride_w = narrow_to_int(stride_w, "conv2d: stride");
  sh.pad_h = narrow_to_int(pad_h, "conv2d: padding"), sh.pad_w = narrow_to_int(pad_w, "conv2d: padding");
  sh.dilation_h = narrow_to_int(dilation_h, "conv2d: dilation");
  sh.dilation_w = narrow_to_int(dilation_w, "conv2d: dilation");
  sh.groups = narrow_to_int(groups, "conv2d: groups"), sh.has_bias = has_bias;
  check_tensor_cap(checked_product({N, C, H, W}), fmt::format("conv2d: the input (N={}, C={}, H={}, W={})", N, C, H, W));
  check_tensor_cap(checked_product({K, C / groups, R, S}),
                   fmt::format("conv2d: the weights (filters K={}, C/groups={}, kernel {}x{})", K, C / groups, R, S));
  // PyTorch's formula; the extent of the dilated window is dilation*(R-1)+1.
  const int64_t span_h = (Checked(dilation_h) * (R - 1) + 1).value(
      fmt::format("conv2d: the dilated kernel height, dilation {} * (kernel {} - 1) + 1,", dilation_h, R));
  const int64_t span_w = (Checked(dilation_w) * (S - 1) + 1).value(
      fmt::format("conv2d: the dilated kernel width, dilation {} * (kernel {} - 1) + 1,", dilation_w, S));
  // Padding fits an int and H, W are within the cap: no overflow.
  const int64_t padded_h = H + 2 * pad_h, padded_w = W + 2 * pad_w;
  if (padded_h < span_h || padded_w < span_w)
    CNN_THROW(
        "conv2d: output would be empty: padded input {}x{} is smaller than the dilated kernel {}x{} "
        "(input {}x{}, kernel {}x{}, padding {}x{}, dilation {}x{})",
        padded_h, padded_w, span_h, span_w, H, W, R, S, pad_h, pad_w, dilation_h, dilation_w);
  sh.P = (padded_h - span_h) / stride_h + 1;
  sh.Q = (padded_w - span_w) / stride_w + 1;
  check_tensor_cap(checked_product({N, K, sh.P, sh.Q}),
                   fmt::format("conv2d: the output (N={}, filters K={}, P={}, Q={})", N, K, sh.P, sh.Q));
  return sh;
}

std::string Conv2dShape::to_string() const {
  return fmt::format(
      "x ({}, {}, {}, {}) * w ({}, {}, {}, {}) -> y ({}, {}, {}, {}), stride {}x{}, pad {}x{}, "
      "dilation {}x{}, groups {}, {}",
      N, C, H, W, K, groups > 0 ? C / groups : 0, R, S, N, K, P, Q, stride_h, stride_w, pad_h, pad_w, dilation_h,
      dilation_w, groups, has_bias ? "bias" : "no bias");
}

// Ops take shapes that may have been filled by hand: recompute P, Q through make().
static void check_shape(const Conv2dShape& sh) {
  Conv2dShape ok = Conv2dShape::make(sh.N, sh.C, sh.H, sh.W, sh.K, sh.R, sh.S, sh.stride_h, sh.stride_w, sh.pad_h,
                                     sh.pad_w, sh.dilation_h, sh.dilation_w, sh.groups, sh.has_bias);
  CNN_CHECK(ok.P == sh.P && ok.Q == sh.Q, "conv2d: shape says output {}x{}, but {} gives {}x{}", sh.P, sh.Q,
            sh.to_string(), ok.P, ok.Q);
}

template <typename T>
void conv2d_forward_reference(const ExecContext& ctx, const Conv2dShape& sh, const T* x, const T* w, const T* b, T* y) {
  check_shape(sh);
  CNN_CHECK(!sh.has_bias || b, "conv2d: the shape has a bias but b is null");
  const int64_t Cg = sh.C / sh.groups, Kg = sh.K / sh.groups;
  for (int64_t n = 0; n < sh.N; ++n)
    for (int64_t k = 0; k < sh.K; ++k)
      for (int64_t p = 0; p < sh.P; ++p)
        for (int64_t q = 0; q < sh.Q; ++q) {
          T acc = sh.has_bias ? b[k] : T(0);
          for (int64_t c = 0; c < Cg; ++c) {
            const int64_t ci = (k / Kg) * Cg + c;
            for (int64_t r = 0; r < sh.R; ++r) {
              const int64_t ih = p * sh.stride_h - sh.pad_h + r * sh.dilation_h;
              if (ih < 0 || ih >= sh.H) continue;
              for (int64_t s = 0; s < sh.S; ++s) {
                const int64_t iw = q * sh.stride_w - sh.pad_w + s * sh.dilation_w;
                if (iw < 0 || iw >= sh.W) continue;
                acc += x[((n * sh.C + ci) * sh.H + ih) * sh.W + iw] * w[((k * Cg + c) * sh.R + r) * sh.S + s];
              }
            }
          }
          y[((n * sh.K + k) * sh.P + p) * sh.Q + q] = acc;
        }
}

template <typename T>
void conv2d_backward_reference(const ExecContext& ctx, const Conv2dShape& sh, const T* x, const T* w, const T* dy,
                               T* dx, T* dw, T* db) {
  check_shape(sh);
  const int64_t Cg = sh.C / sh.groups, Kg = sh.K / sh.groups;
  if (dx) std::fill(dx, dx + sh.N * sh.C * sh.H * sh.W, T(0));
  if (dw) std::fill(dw, dw + sh.weight_numel(), T(0));
  if (db) std::fill(db, db + sh.K, T(0));
  for (int64_t n = 0; n < sh.N; ++n)
    for (int64_t k = 0; k < sh.K; ++k)
      for (int64_t p = 0; p < sh.P; ++p)
        for (int64_t q = 0; q < sh.Q; ++q) {
          const T g = dy[((n * sh.K + k) * sh.P + p) * sh.Q + q];
          if (db) db[k] += g;
          for (int64_t c = 0; c < Cg; ++c) {
            const int64_t ci = (k / Kg) * Cg + c;
            for (int64_t r = 0; r < sh.R; ++r) {
              const int64_t ih = p * sh.stride_h - sh.pad_h + r * sh.dilation_h;
              if (ih < 0 || ih >= sh.H) continue;
              for (int64_t s = 0; s < sh.S; ++s) {
                const int64_t iw = q * sh.stride_w - sh.pad_w + s * sh.dilation_w;
                if (iw < 0 || iw >= sh.W) continue;
                const int64_t xi = ((n * sh.C + ci) * sh.H + ih) * sh.W + iw;
                const int64_t wi = ((k * Cg + c) * sh.R + r) * sh.S + s;
                if (dx) dx[xi] += w[wi] * g;
                if (dw) dw[wi] += x[xi] * g;
              }
            }
          }
        }
}

template void conv2d_forward_reference<float>(const ExecContext&, const Conv2dShape&, const float*, const float*,
                                              const float*, float*);
template void conv2d_forward_reference<double>(const ExecContext&, const Conv2dShape&, const double*, const double*,
                                               const double*, double*);
template void conv2d_backward_reference<float>(const ExecContext&, const Conv2dShape&, const float*, const float*,
                                               const float*, float*, float*, float*);
template void conv2d_backward_reference<double>(const ExecContext&, const Conv2dShape&, const double*, const double*,
                                                const double*, double*, double*, double*);

// SGEMM takes int sizes and the parallel regions must not throw: check before entering them.
static void check_blas_sizes(const Conv2dShape& sh) {
  const int64_t limit = 2147483647;
  const int64_t rows = sh.C / sh.groups * sh.R * sh.S;
  CNN_CHECK(rows <= limit && sh.P * sh.Q <= limit && sh.K <= limit, "conv2d: {} is too large for BLAS int sizes",
            sh.to_string());
}

// A 1x1, stride-1, unpadded conv reads x (C, H*W) directly as its column matrix.
static bool is_pointwise(const Conv2dShape& sh) {
  return sh.R == 1 && sh.S == 1 && sh.stride_h == 1 && sh.stride_w == 1 && sh.pad_h == 0 && sh.pad_w == 0;
}

// Output rows per column block. A whole image's columns over kWholeFloats (fer_cnn's 64-channel
// 48x48 layer: 5.3 MB) spill from the core's cache between im2col writing them and SGEMM packing
// them, so they go in blocks of output rows, about kBlockFloats each and at least kBlockColumns
// columns wide (a narrower SGEMM loses more than the cache saves: 10% faster forward on that
// layer, 2-4% slower on fer_cnn's 24x24 ones when they were cut too), the blocks of equal size.
static constexpr int64_t kWholeFloats = int64_t{1} << 20, kBlockFloats = int64_t{1} << 18, kBlockColumns = 512;
static int64_t block_rows(const Conv2dShape& sh, int64_t rows) {
  if (rows * sh.P * sh.Q <= kWholeFloats) return sh.P;
  const int64_t by_size = kBlockFloats / (rows * sh.Q), by_width = (kBlockColumns + sh.Q - 1) / sh.Q;
  const int64_t want = std::min<int64_t>(sh.P, std::max<int64_t>({1, by_size, by_width}));
  const int64_t blocks = (sh.P + want - 1) / want;
  return (sh.P + blocks - 1) / blocks;
}

// Scratch from ctx.workspace, or from `local` when the context has none.
static float* scratch(const ExecContext& ctx, size_t count, std::vector<float>& local) {
  if (count == 0) return nullptr;
  if (ctx.workspace) return ctx.workspace->get(count);
  local.resize(count);
  return local.data();
}

// Images [begin, end) of slice `i` when N images are cut into `slices` contiguous slices.
static void slice_range(int64_t N, int slices, int i, int64_t& begin, int64_t& end) {
  begin = N * i / slices;
  end = N * (i + 1) / slices;
}

void conv2d_forward_cpu(const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w, const float* b,
                        float* y) {
  check_shape(sh);
  check_blas_sizes(sh);
  CNN_CHECK(!sh.has_bias || b, "conv2d: the shape has a bias but b is null");
  const bool direct = is_pointwise(sh);
  const int64_t Cg = sh.C / sh.groups, Kg = sh.K / sh.groups, PQ = sh.P * sh.Q, HW = sh.H * sh.W;
  const int64_t rows = Cg * sh.R * sh.S;  // of one group's column matrix
  const int slices = static_cast<int>(std::min<int64_t>(ctx.threads(), sh.N));
  const int64_t bp = block_rows(sh, rows);  // output rows per column block
  // One column block per slice: workspace is bounded by the thread count, not the batch. rows and
  // PQ are each within the tensor cap, their product and the slices' are checked.
  const size_t col_size = direct ? 0 : size_t((Checked(rows) * bp * sh.Q).value("conv2d: the column buffer"));
  std::vector<float> local;
  float* cols = scratch(ctx, size_t((Checked(int64_t(col_size)) * slices).value("conv2d: the column buffers")), local);
  // One image's column block and product (into yg, the group's output rows p0 onwards), the
  // product on `threads` threads (1: the calling thread's, inside the parallel region below).
  auto image_group = [&](int64_t n, int g, float* col, int threads) {
    const float* xg = x + (n * sh.C + g * Cg) * HW;  // (Cg, H, W)
    float* yg = y + (n * sh.K + g * Kg) * PQ;        // (Kg, P, Q)
    float beta = 0.0f;
    if (sh.has_bias) {
      for (int64_t k = 0; k < Kg; ++k) std::fill(yg + k * PQ, yg + (k + 1) * PQ, b[g * Kg + k]);
      beta = 1.0f;
    }
    auto gemm = [&](int64_t L, const float* B, int64_t ldb, float* C) {
      if (threads > 1)
        sgemm_parallel(threads, false, false, Kg, L, rows, 1.0f, w + g * Kg * rows, rows, B, ldb, beta, C, PQ);
      else
        sgemm_serial(false, false, Kg, L, rows, 1.0f, w + g * Kg * rows, rows, B, ldb, beta, C, PQ);
    };
    if (direct) return gemm(PQ, xg, PQ, yg);  // y_g (Kg, PQ) = w_g (Kg, rows) * x_g (rows, PQ)
    for (int64_t p0 = 0; p0 < sh.P; p0 += bp) {
      const int64_t p1 = std::min(sh.P, p0 + bp), L = (p1 - p0) * sh.Q;
      im2col_cpu(sh, xg, Cg, p0, p1, col);
      gemm(L, col, L, yg + p0 * sh.Q);  // y_g[:, block] (Kg, L; rows of PQ) = w_g (Kg, rows) * col (rows, L)
    }
  };
  // Fewer images than threads (a frame's faces, batch 1 inference): the images one after another,
  // each product split over the threads by its rows or columns (sgemm_parallel; the sums over rows
  // are not split, so every output is the same sum as on one thread). OpenMP over images alone
  // left all but N threads idle.
  if (sh.N < ctx.threads()) {
    for (int64_t n = 0; n < sh.N; ++n)
      for (int g = 0; g < sh.groups; ++g) image_group(n, g, cols, ctx.threads());
    return;
  }
  BlasSerialScope blas;
  ParallelErrors errors;  // sgemm_serial checks its sizes
#pragma omp parallel num_threads(slices)
  errors.run([&] {
  for (int i = omp_get_thread_num(); i < slices; i += omp_get_num_threads()) {
    float* col = direct ? nullptr : cols + col_size * i;
    int64_t begin, end;
    slice_range(sh.N, slices, i, begin, end);
    for (int64_t n = begin; n < end; ++n)
      for (int g = 0; g < sh.groups; ++g) image_group(n, g, col, 1);
  }
  });
  errors.rethrow();
}

// Sum of row (n), in 8 interleaved lanes so the compiler can vectorise it without reordering.
static float row_sum(const float* row, int64_t n) {
  float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int l = 0; l < 8; ++l) lane[l] += row[j + l];
  for (; j < n; ++j) lane[0] += row[j];
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

float conv2d_bias_gradient_cpu(const Conv2dShape& sh, const float* dy, int64_t k) {
  const int64_t PQ = sh.P * sh.Q;
  double acc = 0.0;
  for (int64_t n = 0; n < sh.N; ++n) acc += row_sum(dy + (n * sh.K + k) * PQ, PQ);
  return static_cast<float>(acc);
}

// db (K) through conv2d_bias_gradient_cpu. Called inside a parallel region: shares the k loop
// among the team without a barrier at its end.
static void bias_gradient(const Conv2dShape& sh, const float* dy, float* db) {
#pragma omp for schedule(static) nowait
  for (int64_t k = 0; k < sh.K; ++k) db[k] = conv2d_bias_gradient_cpu(sh, dy, k);
}

void conv2d_backward_cpu(const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w, const float* dy,
                         float* dx, float* dw, float* db) {
  check_shape(sh);
  check_blas_sizes(sh);
  const bool direct = is_pointwise(sh);
  const int64_t Cg = sh.C / sh.groups, Kg = sh.K / sh.groups, PQ = sh.P * sh.Q, HW = sh.H * sh.W;
  const int64_t rows = Cg * sh.R * sh.S;
  const int slices = static_cast<int>(std::min<int64_t>(ctx.threads(), sh.N));
  const bool columns = !direct && (dx || dw);
  const int64_t bp = block_rows(sh, rows);  // output rows per column block
  // Per slice: one column block (im2col for dw, then reused for dx's columns) and, except for
  // slice 0 which sums straight into dw, a partial dw.
  const size_t col_size = columns ? size_t((Checked(rows) * bp * sh.Q).value("conv2d: the column buffer")) : 0;
  const size_t part_size = dw ? static_cast<size_t>(sh.weight_numel()) : 0;
  std::vector<float> local;
  const Checked scratch_floats = Checked(int64_t(col_size)) * slices + Checked(int64_t(part_size)) * (slices - 1);
  float* scratch_base = scratch(ctx, size_t(scratch_floats.value("conv2d: the backward scratch")), local);
  float* parts = scratch_base ? scratch_base + col_size * slices : nullptr;
  BlasSerialScope blas;
  ParallelErrors errors;  // sgemm_serial checks its sizes; the worksharing parts stay outside run()
#pragma omp parallel num_threads(std::max(slices, db ? ctx.threads() : 1))
  {
    if (db) bias_gradient(sh, dy, db);
    errors.run([&] {
    for (int i = omp_get_thread_num(); (dx || dw) && i < slices; i += omp_get_num_threads()) {
      float* col = columns ? scratch_base + col_size * i : nullptr;
      float* dw_part = !dw ? nullptr : i == 0 ? dw : parts + part_size * (i - 1);  // (K, Cg, R, S)
      int64_t begin, end;
      slice_range(sh.N, slices, i, begin, end);
      for (int64_t n = begin; n < end; ++n) {
        for (int g = 0; g < sh.groups; ++g) {
          const float* xg = x + (n * sh.C + g * Cg) * HW;    // (Cg, H, W)
          const float* dyg = dy + (n * sh.K + g * Kg) * PQ;  // (Kg, PQ)
          const float* wg = w + g * Kg * rows;               // (Kg, rows)
          float* dwg = dw ? dw_part + g * Kg * rows : nullptr;  // (Kg, rows)
          float* dxg = dx ? dx + (n * sh.C + g * Cg) * HW : nullptr;  // (Cg, H, W)
          if (direct) {
            // dw_g (Kg, rows) += dy_g (Kg, PQ) * x_g^T (PQ, rows); the slice's first image overwrites.
            if (dw) sgemm_serial(false, true, Kg, rows, PQ, 1.0f, dyg, PQ, xg, PQ, n == begin ? 0.0f : 1.0f, dwg, rows);
            // dx_g (rows, PQ) = w_g^T (rows, Kg) * dy_g (Kg, PQ)
            if (dx) sgemm_serial(true, false, rows, PQ, Kg, 1.0f, wg, rows, dyg, PQ, 0.0f, dxg, PQ);
            continue;
          }
          if (dx) std::memset(dxg, 0, static_cast<size_t>(Cg * HW) * sizeof(float));
          for (int64_t p0 = 0; p0 < sh.P; p0 += bp) {
            const int64_t p1 = std::min(sh.P, p0 + bp), L = (p1 - p0) * sh.Q;
            const float* dyb = dyg + p0 * sh.Q;  // (Kg, L; rows of PQ)
            if (dw) {
              im2col_cpu(sh, xg, Cg, p0, p1, col);
              // dw_g (Kg, rows) += dy_b (Kg, L) * col^T (L, rows); the slice's first block overwrites.
              const float beta = n == begin && p0 == 0 ? 0.0f : 1.0f;
              sgemm_serial(false, true, Kg, rows, L, 1.0f, dyb, PQ, col, L, beta, dwg, rows);
            }
            if (dx) {
              // dcol (rows, L) = w_g^T (rows, Kg) * dy_b (Kg, L), scattered back by col2im.
              sgemm_serial(true, false, rows, L, Kg, 1.0f, wg, rows, dyb, PQ, 0.0f, col, L);
              col2im_cpu(sh, col, Cg, p0, p1, dxg);
            }
          }
        }
      }
    }
    });
    if (dw && slices > 1) {
#pragma omp barrier
      // Slice order is fixed, so each element's sum is too.
      const int64_t count = sh.weight_numel();
#pragma omp for schedule(static)
      for (int64_t j = 0; j < count; ++j) {
        float acc = dw[j];
        for (int i = 1; i < slices; ++i) acc += parts[part_size * (i - 1) + j];
        dw[j] = acc;
      }
    }
  }
  errors.rethrow();
}

// ---- BF16, F16 and F32CL emulation (the cpu bf16, f16 and f32cl rows) ----

// The FP32 master weights rounded to the values (dtype t) the GPU rows' packed copies hold.
static std::vector<float> weights_as(DType t, const Conv2dShape& sh, const float* w) {
  std::vector<float> out(size_t(sh.weight_numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = round_to(t, w[i]);
  return out;
}

// The weights an emulated row multiplies: the FP32 masters rounded to t's values, as the GPU rows'
// packed 16-bit copies hold them (into `copy`), or the masters themselves (f32cl: nothing rounded).
static const float* emulated_weights(DType t, const Conv2dShape& sh, const float* w, std::vector<float>& copy) {
  if (!w || !is_16bit(t)) return w;
  copy = weights_as(t, sh, w);
  return copy.data();
}

// The activations' dtype of the emulated rows of element type T (float: the f32cl rows).
template <typename T>
constexpr DType emulated_dtype() {
  return std::is_same_v<T, float> ? DType::f32cl : DTypeOf<T>::value;
}

template <typename T>
void conv2d_forward_emulated_cpu(const ExecContext& ctx, const Conv2dShape& sh, const T* x, const float* w,
                                 const float* b, T* y) {
  constexpr DType t = emulated_dtype<T>();
  const ActDims in{sh.N, sh.C, sh.H, sh.W}, out{sh.N, sh.K, sh.P, sh.Q};
  const std::vector<float> xf = widen(ConstView(x, t), in);
  std::vector<float> wcopy, yf(size_t(out.numel()));
  conv2d_forward_cpu(ctx, sh, xf.data(), emulated_weights(t, sh, w, wcopy), b, yf.data());
  narrow(yf.data(), out, View(y, t));
}

template <typename T>
void conv2d_backward_emulated_cpu(const ExecContext& ctx, const Conv2dShape& sh, const T* x, const float* w,
                                  const T* dy, T* dx, float* dw, float* db) {
  constexpr DType t = emulated_dtype<T>();
  const ActDims in{sh.N, sh.C, sh.H, sh.W}, out{sh.N, sh.K, sh.P, sh.Q};
  const std::vector<float> dyf = widen(ConstView(dy, t), out);
  const std::vector<float> xf = x && (dw || db) ? widen(ConstView(x, t), in) : std::vector<float>();
  std::vector<float> wcopy, dxf(dx ? size_t(in.numel()) : 0);
  conv2d_backward_cpu(ctx, sh, xf.empty() ? nullptr : xf.data(), dx ? emulated_weights(t, sh, w, wcopy) : nullptr,
                      dyf.data(), dx ? dxf.data() : nullptr, dw, db);
  if (dx) narrow(dxf.data(), in, View(dx, t));
}

template void conv2d_forward_emulated_cpu(const ExecContext&, const Conv2dShape&, const bf16*, const float*,
                                          const float*, bf16*);
template void conv2d_forward_emulated_cpu(const ExecContext&, const Conv2dShape&, const f16*, const float*,
                                          const float*, f16*);
template void conv2d_backward_emulated_cpu(const ExecContext&, const Conv2dShape&, const bf16*, const float*,
                                           const bf16*, bf16*, float*, float*);
template void conv2d_backward_emulated_cpu(const ExecContext&, const Conv2dShape&, const f16*, const float*,
                                           const f16*, f16*, float*, float*);
template void conv2d_forward_emulated_cpu(const ExecContext&, const Conv2dShape&, const float*, const float*,
                                          const float*, float*);
template void conv2d_backward_emulated_cpu(const ExecContext&, const Conv2dShape&, const float*, const float*,
                                           const float*, float*, float*, float*);

}  // namespace cnn
