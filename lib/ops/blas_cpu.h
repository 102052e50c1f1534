// Row-major SGEMM on the CPU through OpenBLAS, shared by conv2d_cpu and dense_cpu.
// Trap: all CPU parallelism is ours (OpenMP); OpenBLAS must run single-threaded inside our
// parallel regions (hold a BlasSerialScope), else its own pthread pool spins against OpenMP
// threads on the same cores and concurrent calls serialise on its server lock.
#pragma once

#include <cstdint>
#include <string>

namespace cnn {

// While alive, OpenBLAS uses one thread (the caller's); restores the previous count on exit.
class BlasSerialScope {
public:
  BlasSerialScope();
  ~BlasSerialScope();
  BlasSerialScope(const BlasSerialScope&) = delete;
  BlasSerialScope& operator=(const BlasSerialScope&) = delete;

private:
  int m_previous;
};

// OpenBLAS's kernel family in this process ("Haswell", "SkylakeX", "Prescott", ...).
std::string blas_core_name();
// The OPENBLAS_CORETYPE to ask for when OpenBLAS fell back to its generic SSE3 kernels ("Prescott")
// on a CPU it does not know (Debian 12's OpenBLAS 0.3.21 on Sapphire and Emerald Rapids): "SkylakeX"
// with AVX-512 F, CD, BW, DQ and VL, "Haswell" with AVX2 and FMA; empty when the kernels fit or no
// better family applies. OpenBLAS reads the variable once, when it is loaded (before main).
std::string blas_better_core();

// C = alpha * op(A) * op(B) + beta * C, row-major, on the calling thread (one row, M = 1: a GEMV).
// op(A) (M, K) with A (M, lda) or, transposed, A (K, lda); op(B) (K, N) likewise; C (M, ldc).
void sgemm_serial(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                  const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// Same product split into `threads` blocks of C's rows or columns (whichever is longer), one
// single-threaded SGEMM per OpenMP thread. The reduction dimension K is never split, so the result
// is deterministic for a given thread count. Takes its own BlasSerialScope.
void sgemm_parallel(int threads, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                    const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

}  // namespace cnn
