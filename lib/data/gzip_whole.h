// Whole-buffer gzip inflation for data/gzip.cpp's fast path: a file read whole into memory,
// inflated at once. Built with libdeflate where the build found it (gzip_libdeflate.cpp, about 2x
// zlib's speed), else a stand-in that declines (gzip_nolibdeflate.cpp) and zlib's loop does it.
// Trap: this path only ever succeeds or declines; it never words an error. On any failure (bad
// data, truncation, CRC-32 or length mismatch, bytes after a member, more than `cap` bytes out)
// the caller runs the streaming loop over the same bytes, whose messages are the contract.
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

// The gzip members in `in` (n bytes, the whole file) inflated into `out`, every CRC-32 and length
// checked: true when that succeeded with at most `cap` bytes out; false, `out` unspecified, otherwise.
bool inflate_whole(const uint8_t* in, size_t n, int64_t cap, std::vector<uint8_t>& out);
// "libdeflate 1.14" or "zlib 1.2.13": what inflates a whole gzip file in this build.
const char* whole_file_inflater();

}  // namespace cnn
