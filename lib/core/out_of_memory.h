// Out-of-memory errors that say what was being allocated (a layer, or a named buffer such as the
// activation arena), how much was asked and how much the device had free. device_malloc throws
// OutOfMemoryError; the executor adds the layer when one owns the allocation.
// Trap: catch OutOfMemoryError before cnn::Error (it is one), or the layer is never added.
#pragma once

#include <cstddef>
#include <string>

#include "core/error.h"

namespace cnn {

class OutOfMemoryError : public Error {
public:
  explicit OutOfMemoryError(const std::string& what) : Error(what) {}
};

// "1.2 GiB", "3.0 MiB", "512 B": binary units, one decimal.
std::string format_byte_count(double bytes);

// "<what>: CUDA out of memory: asked for 1.2 GiB, 300.0 MiB free of 139.8 GiB (<reason>)";
// the parenthesis is left out when reason is empty.
std::string format_out_of_memory(const std::string& what, const char* device, size_t asked, size_t free_bytes,
                                 size_t total_bytes, const std::string& reason);

}  // namespace cnn
