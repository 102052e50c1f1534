// libFuzzer target for the IDX reader behind data.format idx, gzip layer included: any bytes must
// parse (as images and/or labels) or throw cnn::Error, and an accepted file must be exactly what
// idx_file_bytes writes for the values and dimensions it returned.
#include <string>
#include <vector>

#include "core/error.h"
#include "data/gzip.h"
#include "data/sources.h"
#include "fuzz_util.h"

using namespace cnn;

namespace {

constexpr int64_t kLimit = int64_t{4} << 20;  // decompressed bytes: keeps gzip bombs small

[[noreturn]] void finding(const char* what) { fuzz::finding("fuzz_idx", what); }

void write_seeds(const std::string& dir) {
  std::vector<uint8_t> images(3 * 5 * 4), labels{0, 9, 4};
  for (size_t i = 0; i < images.size(); ++i) images[i] = static_cast<uint8_t>(i * 17);
  const auto ib = idx_file_bytes(images, 3, 5, 4), lb = idx_file_bytes(labels, 3, 0, 0);
  const auto empty = idx_file_bytes({}, 0, 2, 2);
  write_file_bytes(dir + "/seed-0-images", ib.data(), ib.size());
  write_file_bytes(dir + "/seed-1-labels", lb.data(), lb.size());
  write_file_bytes(dir + "/seed-2-empty", empty.data(), empty.size());
  write_gzip_file(dir + "/seed-3-images.gz", ib.data(), ib.size());
  write_gzip_file(dir + "/seed-4-labels.gz", lb.data(), lb.size());
}

}  // namespace

CNN_FUZZ_SEEDS(write_seeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> bytes;
  if (!fuzz::accepted([&] { bytes = decode_file_bytes("fuzz-idx-ubyte", data, size, kLimit); })) return 0;
  for (bool images : {true, false}) {
    std::vector<int64_t> dims;
    std::vector<uint8_t> values;
    if (!fuzz::accepted([&] { values = parse_idx("fuzz-idx-ubyte", bytes.data(), bytes.size(), images, dims); })) {
      continue;
    }
    if (dims.size() != (images ? 3u : 1u)) finding("wrong number of dimensions");
    int64_t count = 1;
    for (int64_t d : dims) count *= d;  // accepted: the reader checked that this fits
    if (static_cast<int64_t>(values.size()) != count) finding("values disagree with the dimensions");
    const auto again = images ? idx_file_bytes(values, dims[0], dims[1], dims[2]) : idx_file_bytes(values, dims[0], 0, 0);
    if (again != bytes) finding("an accepted file differs from its rewrite");
  }
  return 0;
}
