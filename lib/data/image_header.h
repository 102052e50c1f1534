// The dimensions an image file declares, read from its first bytes without decoding it, so an
// image that would decode to gigabytes (a PNG of 875 KB can declare 900 megapixels) is refused
// before the decoder allocates anything. Trap: OpenCV picks its decoder by content, not by file
// name, so a file is checked by its signature too, and content that is none of the formats below
// is refused rather than handed to whatever decoder OpenCV might find for it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace cnn {

struct ImageHeader {
  std::string format;  // "PNG", "JPEG", "BMP", "PNM", "TIFF" or "WebP"
  int64_t width = 0, height = 0;
};

// Reads the format and size from the file's bytes (PNG IHDR, JPEG SOFn, BMP info header, PNM/PAM
// text header, TIFF/BigTIFF first IFD, WebP VP8/VP8L/VP8X). "" on success, else what is wrong.
std::string read_image_header(const uint8_t* data, size_t size, ImageHeader& out);

}  // namespace cnn
