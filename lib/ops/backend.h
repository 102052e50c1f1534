// Backends a layer can run on. `auto` is resolved once per layer at build time and logged.
#pragma once

#include <string>

#include "core/device.h"

namespace cnn {

enum class Backend { cpu, cuda, cudnn };

// Both in backend.cpp, so the op library names backends without the layers.
const char* to_string(Backend b);  // "cpu" | "cuda" | "cudnn"
// "cpu" | "cuda" | "cudnn"; throws cnn::Error otherwise (specs are validated earlier).
Backend parse_backend(const std::string& s);
// Our own kernels of a device (cpu -> cpu, cuda -> cuda): what the loss, the executor's gradient
// sums and batchnorm's phased ops run on, whichever backend the layers chose.
Backend native_backend(Device d);
// Whether this build has the kernels of backend b: cpu always, cuda and cudnn in a CUDA build
// (registry.cpp, the one place that knows which implementations a build has).
bool backend_built(Backend b);

}  // namespace cnn
