// Image files <-> uint8 planes (C, H, W), through OpenCV: the only door to it in the library.
// Trap: without OpenCV in the build (image_io_noopencv.cpp) every call but image_io_available throws.
#pragma once

#include <cstdint>
#include <string>

namespace cnn {

// True when this build can decode and encode image files.
bool image_io_available();
// Decodes any format OpenCV reads as gray (gray = true) or RGB, then converts to `channels`
// (1 -> 3 replicates) and resizes to height x width (INTER_AREA when shrinking, else INTER_LINEAR).
// False when the file can't be read or decoded.
bool read_image_file(const std::string& path, bool gray, int64_t channels, int64_t height, int64_t width,
                     uint8_t* dst);  // (channels, height, width)
// Encodes 1 (gray) or 3 (RGB) planes; the format follows the extension (.png, .jpg, ...).
void write_image_file(const std::string& path,
                      const uint8_t* src,  // (c, h, w)
                      int64_t c, int64_t h, int64_t w);

}  // namespace cnn
