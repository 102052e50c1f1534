// Backend names: the op library owns them so lib/ops (and test_ops) can name and parse a backend
// without linking the layers.
#include "ops/backend.h"

#include "core/error.h"

namespace cnn {

const char* to_string(Backend b) {
  switch (b) {
    case Backend::cpu:
      return "cpu";
    case Backend::cuda:
      return "cuda";
    case Backend::cudnn:
      return "cudnn";
  }
  return "?";
}

Backend native_backend(Device d) { return d == Device::cuda ? Backend::cuda : Backend::cpu; }

Backend parse_backend(const std::string& s) {
  if (s == "cpu") return Backend::cpu;
  if (s == "cuda") return Backend::cuda;
  if (s == "cudnn") return Backend::cudnn;
  CNN_THROW("unknown backend '{}' (expected cpu, cuda or cudnn)", s);
}

}  // namespace cnn
