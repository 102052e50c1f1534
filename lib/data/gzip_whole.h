// What data/gzip.cpp needs to inflate a file read whole: the output size its trailer hints at,
// and the name of the inflater (for the start-up breakdown's data line).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace cnn {

// An output size to start from for the gzip file `in` (n bytes): what the last member's trailer
// says (ISIZE, its length modulo 2^32), kept within what n compressed bytes can hold (deflate
// expands at most 1032:1) and `cap`; at least 1. Never trusted beyond sizing a first buffer.
inline int64_t gzip_size_hint(const uint8_t* in, size_t n, int64_t cap) {
  if (n < 18) return 1;  // less than an empty member's header and trailer
  const uint8_t* t = in + n - 4;
  const int64_t isize = int64_t{t[0]} | int64_t{t[1]} << 8 | int64_t{t[2]} << 16 | int64_t{t[3]} << 24;
  return std::max<int64_t>(1, std::min({isize, static_cast<int64_t>(n) * 1032, cap}));
}

// "zlib 1.2.13": what inflates gzip files in this build.
const char* whole_file_inflater();

}  // namespace cnn
