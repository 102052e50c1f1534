// The cuDNN state of one CUDA context, made and freed by CudaContext (lib/core), which stores it in
// ExecContext::cudnn_handle. Host-includable: no cuDNN types, so lib/core stays behind the wall.
// Trap: these two functions never throw and use nothing of lib/core (core calls them, so a call
// back into core would make the two static libraries depend on each other); core turns the error
// text into a cnn::Error.
#pragma once

#include <string>

namespace cnn::cudnn {

struct State;

// Empty per-op caches and the stream (a cudaStream_t) the handle will be bound to; the handle is
// made on first use (cudnn/handle.h). Null on failure, with the reason in *error.
State* create_state(void* cuda_stream, std::string* error) noexcept;
// Seconds cudnnCreate took (the start-up breakdown); -1 while the handle is not made. Null is fine.
double handle_seconds(const State* state) noexcept;
// Frees the caches' descriptors, then the handle. Null is fine.
void destroy_state(State* state) noexcept;

}  // namespace cnn::cudnn
