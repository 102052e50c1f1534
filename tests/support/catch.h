// Catch2 2 (single header) or Catch2 3 (split headers), whichever is installed; plus
// CNN_SKIP(msg), which reports a skip on Catch2 3 and a warning plus early return on Catch2 2.
#pragma once

#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>
#define CNN_CATCH3 1
using Catch::Approx;
// Catch2 3 renamed the string matcher Contains to ContainsSubstring; keep the Catch2 2 spelling
// working for strings (non-templates win over the range-matcher template).
namespace Catch::Matchers {
inline StringContainsMatcher Contains(const char* s, CaseSensitive cs = CaseSensitive::Yes) {
  return ContainsSubstring(s, cs);
}
inline StringContainsMatcher Contains(const std::string& s, CaseSensitive cs = CaseSensitive::Yes) {
  return ContainsSubstring(s, cs);
}
inline StringContainsMatcher Contains(std::string& s, CaseSensitive cs = CaseSensitive::Yes) {
  return ContainsSubstring(s, cs);
}
inline StringContainsMatcher Contains(std::string&& s, CaseSensitive cs = CaseSensitive::Yes) {
  return ContainsSubstring(s, cs);
}
}  // namespace Catch::Matchers
#else
#include <catch2/catch.hpp>
#endif

#if defined(CNN_CATCH3)
#define CNN_SKIP(msg) SKIP(msg)
#else
#define CNN_SKIP(msg)          \
  do {                         \
    WARN("SKIPPED: " << (msg)); \
    return;                    \
  } while (0)
#endif

#include "core/device.h"

// First statement of every [gpu] test.
#define CNN_REQUIRE_GPU()                                                              \
  do {                                                                                 \
    if (!::cnn::cuda_available()) CNN_SKIP("no usable GPU: " + ::cnn::cuda_device_description()); \
  } while (0)
