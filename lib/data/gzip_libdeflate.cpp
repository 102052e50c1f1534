// inflate_whole with libdeflate (see gzip_whole.h). The output starts at the size the last
// member's trailer gives (ISIZE, bounded) and doubles when a member needs more, up to `cap`.
#include <libdeflate.h>

#include <algorithm>
#include <memory>
#include <string>

#include "data/gzip_whole.h"

namespace cnn {

bool inflate_whole(const uint8_t* in, size_t n, int64_t cap, std::vector<uint8_t>& out) {
  if (n < 18 || cap < 0) return false;  // less than an empty member's header and trailer
  int64_t size = gzip_size_hint(in, n, cap);
  std::unique_ptr<libdeflate_decompressor, void (*)(libdeflate_decompressor*)> d(libdeflate_alloc_decompressor(),
                                                                                 libdeflate_free_decompressor);
  if (!d) return false;
  out.resize(static_cast<size_t>(size));
  size_t pos = 0, used = 0;
  while (pos < n) {
    if (n - pos < 2 || in[pos] != 0x1f || in[pos + 1] != 0x8b) return false;  // not another member
    size_t in_used = 0, out_made = 0;
    const libdeflate_result r = libdeflate_gzip_decompress_ex(d.get(), in + pos, n - pos, out.data() + used,
                                                              out.size() - used, &in_used, &out_made);
    if (r == LIBDEFLATE_INSUFFICIENT_SPACE) {
      if (size >= cap) return false;  // more than `cap`: the streaming loop says how much
      size = std::min(cap, 2 * size);
      out.resize(static_cast<size_t>(size));
      continue;  // the member again, into the larger buffer
    }
    if (r != LIBDEFLATE_SUCCESS || in_used == 0) return false;
    pos += in_used;
    used += out_made;
  }
  out.resize(used);
  return true;
}

const char* whole_file_inflater() {
  static const std::string name = std::string("libdeflate ") + LIBDEFLATE_VERSION_STRING;
  return name.c_str();
}

}  // namespace cnn
