// median_ms_captured (graph/timer.h) on the GPU: a capturable call is captured once and its
// launches timed; a call that breaks stream capture (a stream synchronisation inside it) is timed
// uncaptured instead, and the stream stays usable; an exception inside the capture ends it.
#include <cuda_runtime.h>

#include <cmath>
#include <stdexcept>

#include "core/cuda_context.h"
#include "graph/timer.h"
#include "support/catch.h"
#include "support/test_util.h"

using namespace cnn;

TEST_CASE("median_ms_captured times a capturable call as a graph and falls back where capture breaks", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const ExecContext& ctx = cuda.ctx();
  const auto stream = static_cast<cudaStream_t>(ctx.cuda_stream);
  void* buf = nullptr;
  const size_t bytes = size_t(64) << 20;
  REQUIRE(cudaMalloc(&buf, bytes) == cudaSuccess);
  int calls = 0;

  bool captured = false;
  const double ms = median_ms_captured(ctx, 2, 3, [&] {
    ++calls;
    REQUIRE(cudaMemsetAsync(buf, calls & 0xff, bytes, stream) == cudaSuccess);
  }, &captured);
  CHECK(captured);
  CHECK(calls == 3);  // two warm-up calls, one captured; the timed launches replay the graph
  CHECK(std::isfinite(ms));
  CHECK(ms > 0.0);

  calls = 0;
  const double plain = median_ms_captured(ctx, 1, 3, [&] {
    ++calls;
    cudaMemsetAsync(buf, 0, bytes, stream);
    cudaStreamSynchronize(stream);  // not allowed while capturing: the capture is invalidated
  }, &captured);
  CHECK_FALSE(captured);
  CHECK(calls == 1 + 1 + 3);  // warm-up, the failed capture, three timed uncaptured calls
  CHECK(std::isfinite(plain));
  cudaGetLastError();

  CHECK_THROWS_AS(median_ms_captured(ctx, 1, 3, [&] {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    cudaStreamIsCapturing(stream, &status);
    if (status != cudaStreamCaptureStatusNone) throw std::runtime_error("inside the capture");
  }), std::runtime_error);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusActive;
  REQUIRE(cudaStreamIsCapturing(stream, &status) == cudaSuccess);
  CHECK(status == cudaStreamCaptureStatusNone);
  CHECK(cudaMemsetAsync(buf, 0, bytes, stream) == cudaSuccess);
  CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
  cudaFree(buf);
}
