// What lib/ops/*_cudnn.cpp use: the context's cuDNN handle (rebound when the context's stream
// changed), typed per-op caches in the context's State, RAII descriptors, and a per-shape memo.
// Trap: descriptors are plain host objects, but making them per call costs microseconds that a
// launch-bound step at batch 32 notices (a conv's five: 1.7-4 us on the 2-core dev host, against
// 0.015 us for a memo hit), so ops memoise them, and conv its algorithm choice, per shape.
#pragma once

#include <cudnn.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <unordered_map>

#include "core/error.h"
#include "core/exec_context.h"
#include "cudnn/check.h"
#include "cudnn/state.h"

namespace cnn::cudnn {

// The handle of a CUDA context made by CudaContext, created on first use and bound to the
// context's stream; throws naming `what` for any other context.
inline cudnnHandle_t handle(const ExecContext& ctx, const char* what) {
  if (ctx.device != Device::cuda) CNN_THROW("{}: the cudnn backend needs a CUDA context", what);
  State* s = static_cast<State*>(ctx.cudnn_handle);
  if (!s) CNN_THROW("{}: this context has no cuDNN state (made without CudaContext)", what);
  if (!s->handle) {
    cudnnHandle_t made = nullptr;
    const auto t0 = std::chrono::steady_clock::now();
    CUDNN_CHECK(cudnnCreate(&made));
    s->create_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    s->handle = made;
    CUDNN_CHECK(cudnnSetStream(s->handle, static_cast<cudaStream_t>(ctx.cuda_stream)));
    s->stream = ctx.cuda_stream;
  } else if (s->stream != ctx.cuda_stream) {
    CUDNN_CHECK(cudnnSetStream(s->handle, static_cast<cudaStream_t>(ctx.cuda_stream)));
    s->stream = ctx.cuda_stream;
  }
  return s->handle;
}

// The op's cache object in the context's State, default-constructed on first use.
template <typename T>
T& slot(const ExecContext& ctx, Slot which) {
  State* s = static_cast<State*>(ctx.cudnn_handle);
  std::shared_ptr<void>& p = s->slots[static_cast<size_t>(which)];
  if (!p) p = std::make_shared<T>();
  return *static_cast<T*>(p.get());
}

template <typename T, cudnnStatus_t (*Create)(T*), cudnnStatus_t (*Destroy)(T)>
class Descriptor {
 public:
  Descriptor() { CUDNN_CHECK(Create(&m_desc)); }
  ~Descriptor() {
    if (m_desc) Destroy(m_desc);
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  operator T() const { return m_desc; }

 private:
  T m_desc = nullptr;
};

using TensorDescriptor = Descriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDescriptor = Descriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvolutionDescriptor =
    Descriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor>;
using PoolingDescriptor =
    Descriptor<cudnnPoolingDescriptor_t, cudnnCreatePoolingDescriptor, cudnnDestroyPoolingDescriptor>;
using ActivationDescriptor =
    Descriptor<cudnnActivationDescriptor_t, cudnnCreateActivationDescriptor, cudnnDestroyActivationDescriptor>;

// The legacy cuDNN API takes int sizes and int strides: every dimension and the element count
// of every tensor must fit.
inline bool fits_int(int64_t v) { return v >= 0 && v <= int64_t{0x7fffffff}; }
inline bool fits_nchw(int64_t n, int64_t c, int64_t h, int64_t w) {
  return n > 0 && c > 0 && h > 0 && w > 0 && fits_int(n) && fits_int(c) && fits_int(h) && fits_int(w) &&
         n * c <= int64_t{0x7fffffff} && n * c * h <= int64_t{0x7fffffff} && n * c * h * w <= int64_t{0x7fffffff};
}

// A packed float NCHW tensor; throws naming `what` when the sizes do not fit the legacy API.
inline void set_nchw(cudnnTensorDescriptor_t d, int64_t n, int64_t c, int64_t h, int64_t w, const char* what) {
  if (!fits_nchw(n, c, h, w))
    CNN_THROW("{}: tensor ({}, {}, {}, {}) is too large for cuDNN's int sizes", what, n, c, h, w);
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, static_cast<int>(n),
                                         static_cast<int>(c), static_cast<int>(h), static_cast<int>(w)));
}

// Up to 17 integers that identify a shape (and a mode), as a hash-map key.
struct ShapeKey {
  std::array<int64_t, 17> v{};
  bool operator==(const ShapeKey& o) const { return v == o.v; }
};
struct ShapeKeyHash {
  size_t operator()(const ShapeKey& k) const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the values
    for (int64_t x : k.v) h = (h ^ static_cast<uint64_t>(x)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

// Entries per shape, made by `make(entry)` on first sight. A sweep over many shapes would grow
// without bound, so past kMax entries the memo starts over (references die only then, at the
// start of a call, never while an op holds one).
template <typename Entry>
class ShapeMemo {
 public:
  static constexpr size_t kMax = 512;
  template <typename Make>
  Entry& get(const ShapeKey& key, Make&& make) {
    auto it = m_entries.find(key);
    if (it != m_entries.end()) return *it->second;
    if (m_entries.size() >= kMax) m_entries.clear();
    auto entry = std::make_unique<Entry>();
    make(*entry);
    return *m_entries.emplace(key, std::move(entry)).first->second;
  }

 private:
  std::unordered_map<ShapeKey, std::unique_ptr<Entry>, ShapeKeyHash> m_entries;
};

}  // namespace cnn::cudnn
