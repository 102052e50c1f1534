// Creation and destruction of the cuDNN state of a context (see context.h).
#include "cudnn/context.h"

#include <new>

#include "cudnn/state.h"

namespace cnn::cudnn {

// The handle itself is made on first use (cudnn/handle.h): cudnnCreate loads cuDNN's kernels and
// costs time and memory that a run on our own CUDA kernels should not pay.
State* create_state(void* cuda_stream, std::string* error) noexcept {
  State* s = new (std::nothrow) State;
  if (!s) {
    *error = "out of host memory for the cuDNN state";
    return nullptr;
  }
  s->stream = cuda_stream;
  return s;
}

double handle_seconds(const State* state) noexcept { return state && state->handle ? state->create_s : -1; }

void destroy_state(State* state) noexcept {
  if (!state) return;
  for (auto& slot : state->slots) slot.reset();  // descriptors before the handle
  if (state->handle) cudnnDestroy(state->handle);
  delete state;
}

}  // namespace cnn::cudnn
