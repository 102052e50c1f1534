// Image files <-> uint8 planes (C, H, W), through OpenCV: the only door to it in the library.
// Files are read by us (regular files only, at most kMaxImageFileBytes), their header checked
// against kMaxImagePixels (image_header.h), and only then decoded from memory.
// Trap: without OpenCV in the build (image_io_noopencv.cpp) every call but image_io_available throws.
#pragma once

#include <cstdint>
#include <string>

namespace cnn {

// True when this build can decode and encode image files.
bool image_io_available();

// Decodes the file as gray (gray = true) or RGB, then converts to `channels` (1 -> 3 replicates)
// and resizes to height x width (INTER_AREA when shrinking, else INTER_LINEAR). Returns "" when
// dst was filled, else why the file is a bad image: larger than kMaxImageFileBytes, content that
// is none of PNG/JPEG/BMP/PNM/TIFF/WebP, a header declaring more than kMaxImagePixels pixels
// (refused before decoding), or a decoder failure. Throws cnn::Error naming the file when it
// can't be opened or is not a regular file (a FIFO is never opened blocking). What the decoders
// print on stderr is not captured here: callers wrap calls in a StderrCapture (stderr_capture.h).
std::string decode_image_file(const std::string& path, bool gray, int64_t channels, int64_t height, int64_t width,
                              uint8_t* dst);  // (channels, height, width)
// decode_image_file for one file, with the decoders' stderr messages captured and logged as
// warnings naming the file. Returns false when the decoder fails on a file whose header passed;
// throws cnn::Error naming the file and the reason for every other problem.
bool read_image_file(const std::string& path, bool gray, int64_t channels, int64_t height, int64_t width,
                     uint8_t* dst);  // (channels, height, width)
// Encodes 1 (gray) or 3 (RGB) planes; the format follows the extension (.png, .jpg, ...).
void write_image_file(const std::string& path,
                      const uint8_t* src,  // (c, h, w)
                      int64_t c, int64_t h, int64_t w);

}  // namespace cnn
