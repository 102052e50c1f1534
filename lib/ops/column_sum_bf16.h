// Column sums of a row-major BF16 (or F16) matrix into FP32: the bias gradient of the BF16 rows whose
// activation gradient is (rows, cols) with the bias along cols (dense: dy (N, K); cuDNN's BF16
// convolutions: dy (N, P, Q, K) channels-last, rows = N*P*Q). FP32 sums in a fixed order
// (no atomics): each chunk of rows is summed by one block (rows in order within 32 or 8 slices,
// then the slices in order), then the chunks' partials in chunk order.
// Trap: the chunking is a function of `rows` alone (never of the device), so the bits are the same
// on every GPU; more than one chunk needs the caller's scratch (column_sum_bf16_scratch_bytes),
// which the caller carves from ctx.workspace next to its own scratch.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "core/bf16.h"
#include "core/fp16.h"
#include "core/exec_context.h"

namespace cnn {

// Rows one block sums: at least 512, and enough that no more than 1024 chunks remain for the
// second pass (which sums one column's partials in one thread).
inline int64_t column_sum_bf16_chunk_rows(int64_t rows) {
  constexpr int64_t kMinChunk = 512, kMaxChunks = 1024;
  const int64_t chunk = std::max(kMinChunk, (rows + kMaxChunks - 1) / kMaxChunks);
  return (chunk + 31) / 32 * 32;
}
inline int64_t column_sum_bf16_chunks(int64_t rows) {
  const int64_t chunk = column_sum_bf16_chunk_rows(rows);
  return std::max<int64_t>(1, (rows + chunk - 1) / chunk);
}
// Bytes of scratch column_sum_cuda needs: the chunks' partials, none for a single chunk.
inline size_t column_sum_bf16_scratch_bytes(int64_t rows, int64_t cols) {
  const int64_t chunks = column_sum_bf16_chunks(rows);
  return chunks > 1 ? size_t(chunks) * size_t(cols) * sizeof(float) : 0;
}

// sum[c] = sum over r of x[r, c]. x (rows, cols) bf16 or f16 row-major, device memory; sum (cols)
// FP32; scratch: column_sum_bf16_scratch_bytes(rows, cols) bytes of device memory (null when that
// is 0). Queued on ctx.cuda_stream; 16-byte loads where cols % 8 == 0 and x is 16-byte aligned.
void column_sum_cuda(const ExecContext& ctx, int64_t rows, int64_t cols, const bf16* x, float* sum, float* scratch);
void column_sum_cuda(const ExecContext& ctx, int64_t rows, int64_t cols, const f16* x, float* sum, float* scratch);
// The same on an FP32 matrix (the f32cl convolutions' bias gradient, dy (N, P, Q, K)): the same
// chunks and scratch; 16-byte loads of 4 columns where cols % 4 == 0 and x is 16-byte aligned.
void column_sum_cuda(const ExecContext& ctx, int64_t rows, int64_t cols, const float* x, float* sum, float* scratch);

}  // namespace cnn
