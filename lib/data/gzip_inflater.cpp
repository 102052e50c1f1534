// The inflater's name (see gzip_whole.h): zlib, through gzip.cpp's streaming loop.
#include <zlib.h>

#include <string>

#include "data/gzip_whole.h"

namespace cnn {

const char* whole_file_inflater() {
  static const std::string name = std::string("zlib ") + zlibVersion();
  return name.c_str();
}

}  // namespace cnn
