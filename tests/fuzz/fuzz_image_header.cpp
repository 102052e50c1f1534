// libFuzzer target for the image header parser that guards decoding (data/image_header.h): any
// bytes give a problem or a format with positive dimensions, without reading outside them.
#include <string>

#include "data/gzip.h"
#include "data/image_header.h"
#include "fuzz_util.h"

using namespace cnn;

namespace {

[[noreturn]] void finding(const char* what) { fuzz::finding("fuzz_image_header", what); }

void write_seeds(const std::string& dir) {
  const std::string seeds[] = {
      std::string("\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR\0\0\0\x10\0\0\0\x08\x08\x00\0\0\0", 29),
      std::string("\xFF\xD8\xFF\xE0\0\x04xx\xFF\xC0\0\x0b\x08\0\x08\0\x10\x01\x01\x11\0", 21),
      std::string("BM\0\0\0\0\0\0\0\0\0\0\0\0\x28\0\0\0\x10\0\0\0\xF8\xFF\xFF\xFF", 26),
      "P5\n# c\n16 8\n255\n", "P7\nWIDTH 4\nHEIGHT 2\nENDHDR\n",
      std::string("II*\0\x08\0\0\0\x02\0\0\x01\x03\0\x01\0\0\0\x10\0\0\0\x01\x01\x04\0\x01\0\0\0\x08\0\0\0", 34),
      std::string("RIFF\0\0\0\0WEBPVP8L\0\0\0\0\x2f\x0f\xc0\x01\0", 25),
  };
  int i = 0;
  for (const std::string& s : seeds) write_file_bytes(dir + "/seed-" + std::to_string(i++), s.data(), s.size());
}

}  // namespace

CNN_FUZZ_SEEDS(write_seeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ImageHeader h;
  const std::string problem = read_image_header(data, size, h);
  if (problem.empty() && (h.width <= 0 || h.height <= 0 || h.format.empty())) finding("accepted a header without size");
  return 0;
}
