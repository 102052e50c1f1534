// Helpers shared by the tests/data suites: catching an error's message, tiny hand-made datasets.
#pragma once

#include <string>
#include <vector>

#include "data/dataset.h"

namespace cnn::test {

// The what() of the cnn::Error `f` throws, or "" when it throws nothing.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// n images of (c, h, w) whose bytes are (i * 37 + j * 11 + 5) % 256, label i % classes.
inline Dataset patterned_dataset(int64_t n, int64_t c, int64_t h, int64_t w, int64_t classes) {
  Dataset d;
  d.channels = c;
  d.height = h;
  d.width = w;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < c * h * w; ++j) d.pixels.push_back(static_cast<uint8_t>((i * 37 + j * 11 + 5) % 256));
    d.labels.push_back(static_cast<int32_t>(i % classes));
  }
  return d;
}

}  // namespace cnn::test
