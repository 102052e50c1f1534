// Helpers shared by the tests/data suites: catching an error's message, tiny hand-made datasets.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "data/dataset.h"
#include "data/gzip.h"
#include "data/sources.h"

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

// Writes train (n_train) and t10k (n_test) idx files of h x w images in dir, gzipped when gz;
// pixel j of image i is (i*31+j)%256, its label i%10.
inline void write_idx_set(const std::filesystem::path& dir, int64_t n_train, int64_t n_test, int64_t h, int64_t w,
                          bool gz) {
  for (auto [prefix, n] : {std::pair<std::string, int64_t>{"train", n_train}, {"t10k", n_test}}) {
    std::vector<uint8_t> images, labels;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < h * w; ++j) images.push_back(static_cast<uint8_t>((i * 31 + j) % 256));
      labels.push_back(static_cast<uint8_t>(i % 10));
    }
    auto ib = idx_file_bytes(images, n, h, w), lb = idx_file_bytes(labels, n, 0, 0);
    std::string ip = (dir / (prefix + "-images-idx3-ubyte")).string(), lp = (dir / (prefix + "-labels-idx1-ubyte")).string();
    if (gz) {
      write_gzip_file(ip + ".gz", ib.data(), ib.size());
      write_gzip_file(lp + ".gz", lb.data(), lb.size());
    } else {
      write_file_bytes(ip, ib.data(), ib.size());
      write_file_bytes(lp, lb.data(), lb.size());
    }
  }
}

// True in an AddressSanitizer build (tools/sanitize.sh), whose programs (this one, and cnn-train
// of the same build) reserve terabytes of address space for the shadow: no address-space cap
// (ulimit -v) can be applied to them.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif
#else
inline constexpr bool kAddressSanitizer = false;
#endif

// "ulimit -v <mib MiB>; " for a shell command line, or "" in an AddressSanitizer build.
inline std::string address_space_cap(int64_t mib) {
  return kAddressSanitizer ? std::string() : fmt::format("ulimit -v {}; ", mib * 1024);
}

// Runs the hidden test case `name` of this test binary in a child process under an address-space
// cap of `mib` MiB (ulimit -v) and a wall-clock limit of `seconds`; true when it passed. The case
// writes its own inputs.
inline bool passes_bounded(const std::string& name, int mib, int seconds) {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return false;
  self[n] = 0;
  const std::string limit = address_space_cap(mib);
  const std::string cmd =
      fmt::format("{}exec timeout {} '{}' '{}' >/dev/null 2>&1", limit, seconds, self, name);
  return std::system(cmd.c_str()) == 0;
}

}  // namespace cnn::test
