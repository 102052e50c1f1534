// inflate_whole without libdeflate (see gzip_whole.h): declines, so zlib's streaming loop in
// gzip.cpp inflates the file, into an output sized from its trailer.
#include <zlib.h>

#include <string>

#include "data/gzip_whole.h"

namespace cnn {

bool inflate_whole(const uint8_t*, size_t, int64_t, std::vector<uint8_t>&) { return false; }

const char* whole_file_inflater() {
  static const std::string name = std::string("zlib ") + zlibVersion();
  return name.c_str();
}

}  // namespace cnn
