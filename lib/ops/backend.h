// Backends a layer can run on. `auto` is resolved once per layer at build time and logged.
#pragma once

#include <string>

namespace cnn {

enum class Backend { cpu, cuda, cudnn };

// Both in backend.cpp, so the op library names backends without the layers.
const char* to_string(Backend b);  // "cpu" | "cuda" | "cudnn"
// "cpu" | "cuda" | "cudnn"; throws cnn::Error otherwise (specs are validated earlier).
Backend parse_backend(const std::string& s);

}  // namespace cnn
