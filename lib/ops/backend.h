// Backends a layer can run on. `auto` is resolved once per layer at build time and logged.
#pragma once

#include <string>

namespace cnn {

enum class Backend { cpu, cuda, cudnn };

// Both in backend.cpp, so the op library names backends without the layers.
const char* to_string(Backend b);  // "cpu" | "cuda" | "cudnn"
// "cpu" | "cuda" | "cudnn"; throws cnn::Error otherwise (specs are validated earlier).
Backend parse_backend(const std::string& s);
// Whether this build has the kernels of backend b: cpu always, cuda and cudnn in a CUDA build
// (registry.cpp, the one place that knows which implementations a build has).
bool backend_built(Backend b);

}  // namespace cnn
