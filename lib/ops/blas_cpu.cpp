// OpenBLAS wrapper: serial SGEMM plus an OpenMP split over output blocks (see blas_cpu.h).
// Trap: cblas takes int sizes; shapes beyond INT_MAX are rejected rather than truncated.
#include "ops/blas_cpu.h"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <initializer_list>
#include <string>

#include "core/error.h"
#include "core/parallel_errors.h"

namespace cnn {

BlasSerialScope::BlasSerialScope() : m_previous(openblas_get_num_threads()) {
  if (m_previous != 1) openblas_set_num_threads(1);
}

BlasSerialScope::~BlasSerialScope() {
  if (m_previous != 1) openblas_set_num_threads(m_previous);
}

std::string blas_core_name() {
  const char* name = openblas_get_corename();
  return name ? name : "";
}

std::string blas_better_core() {
  if (blas_core_name() != "Prescott") return "";
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return "";
}

static int to_blas_int(int64_t v) {
  CNN_CHECK(v >= 0 && v <= INT_MAX, "sgemm dimension {} does not fit the BLAS int", v);
  return static_cast<int>(v);
}

void sgemm_serial(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                  const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (M == 1 && K > 0) {
    // One row times op(B) is a GEMV, which streams B once; SGEMM packs all of B first, which at
    // batch 1 was most of a dense layer's time. beta 0 never reads C (it may hold anything).
    if (beta == 0.0f) std::fill(C, C + N, 0.0f);
    const int inc_a = trans_a ? to_blas_int(lda) : 1;
    if (trans_b)  // B (N, ldb): C = B a
      cblas_sgemv(CblasRowMajor, CblasNoTrans, to_blas_int(N), to_blas_int(K), alpha, B, to_blas_int(ldb), A, inc_a,
                  beta, C, 1);
    else  // B (K, ldb): C = B^T a
      cblas_sgemv(CblasRowMajor, CblasTrans, to_blas_int(K), to_blas_int(N), alpha, B, to_blas_int(ldb), A, inc_a,
                  beta, C, 1);
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, to_blas_int(M),
              to_blas_int(N), to_blas_int(K), alpha, A, to_blas_int(lda), B, to_blas_int(ldb), beta, C,
              to_blas_int(ldc));
}

void sgemm_parallel(int threads, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                    const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  // Checked before the region too, so a bad size fails before any thread starts.
  for (int64_t v : {M, N, K, lda, ldb, ldc}) to_blas_int(v);
  BlasSerialScope serial;
  // Below ~1 MFLOP a fork/join costs more than it saves.
  const bool small = 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K) < 1e6;
  if (threads <= 1 || small) {
    sgemm_serial(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  const bool split_rows = M > N;
  const int64_t extent = split_rows ? M : N;
  // Blocks are multiples of 16 so each thread's SGEMM works on whole vector tiles.
  int64_t block = (extent + threads - 1) / threads;
  block = std::max<int64_t>(16, (block + 15) / 16 * 16);
  const int blocks = static_cast<int>((extent + block - 1) / block);
  ParallelErrors errors;
#pragma omp parallel for num_threads(std::min(threads, blocks)) schedule(static, 1)
  for (int i = 0; i < blocks; ++i) {
    errors.run([&] {
      const int64_t lo = i * block, len = std::min(block, extent - lo);
      if (split_rows) {
        // Rows lo.. of op(A): A (M, lda) steps by rows, A^T (K, lda) by columns.
        const float* a = trans_a ? A + lo : A + lo * lda;
        sgemm_serial(trans_a, trans_b, len, N, K, alpha, a, lda, B, ldb, beta, C + lo * ldc, ldc);
      } else {
        const float* b = trans_b ? B + lo * ldb : B + lo;
        sgemm_serial(trans_a, trans_b, M, len, K, alpha, A, lda, b, ldb, beta, C + lo, ldc);
      }
    });
  }
  errors.rethrow();
}

}  // namespace cnn
