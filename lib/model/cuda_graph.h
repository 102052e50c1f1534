// The CUDA runtime calls of the graph-captured training step, kept out of train_step.cpp: a
// captured CUDA graph (begin on the context's stream, end, launch), pinned host memory and
// stream-ordered copies. Host-includable; cuda_graph_nocuda.cpp stands in without CUDA (throws).
// Trap: while a capture is open, nothing on this thread may allocate, free, synchronise or use
// the legacy default stream (cudaMemcpy, cudaMemset): that invalidates the capture.
#pragma once

#include <cstddef>
#include <string>

#include "core/exec_context.h"

namespace cnn {

// Page-locked host memory, so copies to and from it are asynchronous and capturable.
class PinnedBuffer {
public:
  PinnedBuffer() = default;
  PinnedBuffer(size_t bytes, const std::string& what);
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  void* data() const { return m_data; }
  size_t bytes() const { return m_bytes; }

private:
  void* m_data = nullptr;
  size_t m_bytes = 0;
};

// Queued on ctx's stream (capturable when one side is pinned or both are on the device).
void copy_async(const ExecContext& ctx, void* dst, const void* src, size_t bytes);
// Waits for ctx's stream; throws on an asynchronous error.
void stream_synchronize(const ExecContext& ctx);

class CudaGraph {
public:
  CudaGraph() = default;
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Starts capturing ctx's stream (thread-local mode: other threads' CUDA calls are unaffected).
  void begin_capture(const ExecContext& ctx);
  // Ends the capture and instantiates it. On a capture error throws, leaving nothing captured
  // and the stream usable. abort_capture() ends a capture after an exception, never throws.
  void end_capture(const ExecContext& ctx);
  void abort_capture(const ExecContext& ctx) noexcept;
  bool ready() const { return m_exec != nullptr; }
  size_t nodes() const { return m_nodes; }
  double instantiate_seconds() const { return m_instantiate_s; }  // what end_capture's instantiation took
  // One replay on ctx's stream.
  void launch(const ExecContext& ctx);
  void reset() noexcept;

private:
  void* m_graph = nullptr;  // cudaGraph_t
  void* m_exec = nullptr;   // cudaGraphExec_t
  size_t m_nodes = 0;
  double m_instantiate_s = 0;
};

}  // namespace cnn
