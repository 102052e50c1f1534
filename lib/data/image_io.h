// Image files <-> uint8 planes (C, H, W), through OpenCV: the only door to it in the library.
// Files are read by us (regular files only, at most kMaxImageFileBytes), their header checked
// against kMaxImagePixels (image_header.h), and only then decoded from memory.
// Trap: without OpenCV in the build (image_io_noopencv.cpp) every call but image_io_available throws.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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
// An image at its own size, as decoded or as a video frame: interleaved rows, unlike the planes above.
struct Image {
  int64_t height = 0, width = 0, channels = 0;  // channels: 1 (gray) or 3 (RGB order)
  std::vector<uint8_t> pixels;                  // (height, width, channels)
};

// The file decoded at its own size, gray (gray = true) or RGB, with the checks of decode_image_file
// and the decoders' stderr logged as warnings naming the file. Throws cnn::Error naming the file
// and the reason when it can't be decoded.
Image read_image(const std::string& path, bool gray);
// One channel: a copy; three: the luma OpenCV's RGB2GRAY gives (0.299 R + 0.587 G + 0.114 B).
Image gray_image(const Image& img);
// The img pixels inside (x, y, w, h) (which must lie inside img), resized to height x width
// (INTER_AREA when shrinking, else INTER_LINEAR) and written as `channels` planes (a gray image
// replicated into 3; an RGB image into 1 is an error, as for decode_image_file).
void resize_region(const Image& img, int64_t x, int64_t y, int64_t w, int64_t h, int64_t channels, int64_t height,
                   int64_t width,
                   uint8_t* dst);  // (channels, height, width)
// Encodes the image (the format follows the extension); Error naming the path when it can't.
void write_image(const std::string& path, const Image& img);

// Encodes 1 (gray) or 3 (RGB) planes; the format follows the extension (.png, .jpg, ...).
void write_image_file(const std::string& path,
                      const uint8_t* src,  // (c, h, w)
                      int64_t c, int64_t h, int64_t w);

}  // namespace cnn
