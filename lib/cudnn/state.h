// What ExecContext::cudnn_handle points to in a CUDA build: the cudnnHandle_t of the context and
// one type-erased cache slot per op (descriptors per shape, chosen algorithms, scratch).
// Trap: a slot's deleter is made by the op that fills it, so this folder needs no op types; a
// State belongs to one context and is used by one thread at a time, like the context's stream.
#pragma once

#include <cudnn.h>

#include <array>
#include <memory>

namespace cnn::cudnn {

enum class Slot { conv2d, pool2d, batchnorm, activation, softmax, count };

struct State {
  cudnnHandle_t handle = nullptr;
  void* stream = nullptr;  // the cudaStream_t the handle is bound to
  double create_s = -1;    // seconds cudnnCreate took (handle.h), for the start-up breakdown
  std::array<std::shared_ptr<void>, static_cast<size_t>(Slot::count)> slots;
};

}  // namespace cnn::cudnn
