// GPU-resident batches against the CPU Loader (workers 0): every batch of whole epochs, train mode
// with crop+padding, flip, rotation, brightness and contrast, eval centre and ten crops, rank shares
// (empty ones included); all batches of several epochs are queued before one synchronisation, so
// the pinned staging ring and the per-epoch order uploads are exercised too. The bf16 and f16
// batches (BatchFormat) against the f32 ones rounded on the host, NCHW and channels-last.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "core/error.h"
#include "core/float_bits.h"
#include "core/tensor.h"
#include "data/gpu_dataset.h"
#include "data/loader.h"
#include "data/synthetic_faces.h"
#include "support/catch.h"
#include "support/device_floats.h"
#include "support/half_bits.h"
#include "support/nhwc.h"
#include "support/test_util.h"
#include "support/tolerance.h"

using namespace cnn;
using cnn::test::DeviceFloats;

namespace {

// Both sides run augment_math.h with every product and sum rounded separately, so they should agree
// bit for bit; 1e-5 (normalised units) allows a last-bit difference in the bilinear rotation.
constexpr test::Tolerance kAugmentTol{1e-5, 0.0};

AugmentSpec full_augment() {
  AugmentSpec a;
  a.crop_size = 16;
  a.crop_padding = 2;
  a.hflip = true;
  a.rotate = 20;
  a.brightness = 0.2;
  a.contrast = 0.3;
  return a;
}

struct HostBatch {
  int64_t n = 0;
  std::vector<float> images;    // (n * crops, C, h, w)
  std::vector<int32_t> labels;  // (n) read back from the device
  std::vector<int32_t> host_labels;
};

// Every batch of `epochs`, all queued before a single synchronisation.
std::vector<HostBatch> gpu_batches(GpuDataset& gd, const CudaContext& cuda, const std::vector<int64_t>& epochs,
                                   int64_t batch_size) {
  const int64_t rows = batch_size * gd.crops(), per = gd.output_shape().numel();
  const int64_t count = static_cast<int64_t>(epochs.size()) * gd.batches_per_epoch();
  DeviceFloats images = DeviceFloats::poisoned(std::max<int64_t>(1, count * rows * per));
  Tensor labels = Tensor::empty(Shape{std::max<int64_t>(1, count * batch_size)}, Device::cuda, "test labels");
  std::vector<HostBatch> out;
  int64_t k = 0;
  for (int64_t e : epochs) {
    gd.start_epoch(e);
    for (int64_t b = 0; b < gd.batches_per_epoch(); ++b, ++k) {
      HostBatch hb;
      gd.make_batch(b, images.data() + k * rows * per, reinterpret_cast<int32_t*>(labels.data()) + k * batch_size,
                    hb.n);
      hb.host_labels = gd.batch_labels(b);
      out.push_back(std::move(hb));
    }
  }
  cuda.synchronize();
  const std::vector<float> all = images.get();
  std::vector<int32_t> all_labels(static_cast<size_t>(labels.numel()));
  device_memcpy(all_labels.data(), Device::cpu, labels.data(), Device::cuda, all_labels.size() * sizeof(int32_t));
  for (size_t i = 0; i < out.size(); ++i) {
    const auto first = all.begin() + static_cast<int64_t>(i) * rows * per;
    out[i].images.assign(first, first + out[i].n * gd.crops() * per);
    const auto lab = all_labels.begin() + static_cast<int64_t>(i) * batch_size;
    out[i].labels.assign(lab, lab + out[i].n);
  }
  return out;
}

std::vector<Batch> cpu_batches(Loader& l, const std::vector<int64_t>& epochs) {
  std::vector<Batch> out;
  for (int64_t e : epochs) {
    l.start_epoch(e);
    Batch b;
    while (l.next(b)) out.push_back(b);
  }
  return out;
}

void check_equal(const std::vector<Batch>& cpu, const std::vector<HostBatch>& gpu, test::Tolerance tol) {
  REQUIRE(cpu.size() == gpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    INFO("batch " << i << " of the run (epoch " << cpu[i].epoch << ", index " << cpu[i].index << ")");
    REQUIRE(gpu[i].n == cpu[i].size());
    CHECK(gpu[i].labels == cpu[i].labels);
    CHECK(gpu[i].host_labels == cpu[i].labels);
    const std::vector<float> ref = cpu[i].images.to_vector();
    CHECK(test::compare(gpu[i].images, ref, tol) == "");
  }
}

// Runs the CPU Loader and a GpuDataset with the same options over `epochs` and compares them.
void compare_with_loader(const Dataset& d, const LoaderOptions& o, const AugmentSpec& a,
                         const std::vector<int64_t>& epochs, test::Tolerance tol) {
  const Normalization norm = compute_normalization(d);
  CudaContext cuda;
  Loader loader(d, o, norm, a);
  GpuDataset gd(d, o, norm, a, cuda.ctx());
  REQUIRE(gd.batches_per_epoch() == loader.batches_per_epoch());
  REQUIRE(gd.output_shape() == loader.output_shape());
  check_equal(cpu_batches(loader, epochs), gpu_batches(gd, cuda, epochs, o.batch_size), tol);
}

}  // namespace

TEST_CASE("gpu-resident train batches equal the cpu loader's over whole epochs", "[gpu]") {
  CNN_REQUIRE_GPU();
  for (int64_t channels : {1, 3}) {
    INFO("channels " << channels);
    const Dataset d = make_synthetic_faces(45, 5, channels, 18, 18, 21);
    LoaderOptions o;
    o.batch_size = 8;  // 5 full batches and one of 5
    o.seed = 9;
    compare_with_loader(d, o, full_augment(), {0, 3, 4}, kAugmentTol);
  }
}

TEST_CASE("gpu-resident batches with only crop and flip equal the cpu loader's bit for bit", "[gpu]") {
  CNN_REQUIRE_GPU();
  const Dataset d = make_synthetic_faces(30, 3, 1, 14, 14, 5);
  AugmentSpec a;
  a.crop_size = 12;
  a.crop_padding = 3;
  a.hflip = true;
  LoaderOptions o;
  o.batch_size = 7;
  o.seed = 2;
  compare_with_loader(d, o, a, {1, 2}, test::kExact);
  a.crop_size = 0;  // neither crop nor padding: the whole image, flipped or not
  a.crop_padding = 0;
  compare_with_loader(d, o, a, {0}, test::kExact);
}

TEST_CASE("gpu-resident eval batches equal the cpu loader's centre crops and ten crops bit for bit", "[gpu]") {
  CNN_REQUIRE_GPU();
  const Dataset d = make_synthetic_faces(23, 4, 3, 17, 18, 8);
  for (bool ten : {false, true}) {
    INFO("ten_crop " << ten);
    LoaderOptions o;
    o.batch_size = 6;
    o.mode = LoaderMode::eval;
    o.ten_crop = ten;
    compare_with_loader(d, o, full_augment(), {0, 2}, test::kExact);
  }
}

TEST_CASE("gpu-resident rank shares equal the cpu loader's, including empty ones", "[gpu]") {
  CNN_REQUIRE_GPU();
  // 37 samples, 3 ranks of 4: three full global batches of 12 and a last one of 1 (ranks 1 and 2 empty).
  const Dataset d = make_synthetic_faces(37, 7, 1, 18, 18, 3);
  for (bool drop_last : {false, true}) {
    for (int64_t rank = 0; rank < 3; ++rank) {
      INFO("rank " << rank << " drop_last " << drop_last);
      LoaderOptions o;
      o.batch_size = 4;
      o.seed = 17;
      o.rank = rank;
      o.world_size = 3;
      o.drop_last = drop_last;
      compare_with_loader(d, o, full_augment(), {0, 1}, kAugmentTol);
    }
  }
}

namespace {

// Every batch of `epochs` stored in `format`, all queued before one synchronisation: each batch's
// n * crops images as 32-bit words (f32) or 16-bit ones (bf16, f16), in the format's order. The
// buffer starts all ones (a NaN in every dtype), so an element the kernel leaves fails.
std::vector<std::vector<uint32_t>> gpu_batch_words(GpuDataset& gd, const CudaContext& cuda,
                                                   const std::vector<int64_t>& epochs, int64_t batch_size,
                                                   const BatchFormat& format) {
  const int64_t rows = batch_size * gd.crops(), per = gd.output_shape().numel();
  const int64_t count = static_cast<int64_t>(epochs.size()) * gd.batches_per_epoch();
  const size_t width = format.dtype == DType::f32 ? 4 : 2;
  DeviceFloats buffer(std::vector<float>(size_t(std::max<int64_t>(1, count * rows * per)), float_from_bits(~0u)));
  std::vector<int64_t> ns;
  int64_t k = 0;
  for (int64_t e : epochs) {
    gd.start_epoch(e);
    for (int64_t b = 0; b < gd.batches_per_epoch(); ++b, ++k) {
      int64_t n = 0;
      gd.make_batch(b, reinterpret_cast<char*>(buffer.data()) + size_t(k * rows * per) * width, format, nullptr, n);
      ns.push_back(n);
    }
  }
  cuda.synchronize();
  const std::vector<float> all = buffer.get();
  const char* bytes = reinterpret_cast<const char*>(all.data());
  std::vector<std::vector<uint32_t>> out;
  for (size_t i = 0; i < ns.size(); ++i) {
    std::vector<uint32_t> words(size_t(ns[i] * gd.crops() * per));
    for (size_t j = 0; j < words.size(); ++j) {
      const char* at = bytes + (i * size_t(rows * per) + j) * width;
      if (width == 4) {
        std::memcpy(&words[j], at, 4);
      } else {
        uint16_t h = 0;
        std::memcpy(&h, at, 2);
        words[j] = h;
      }
    }
    out.push_back(std::move(words));
  }
  return out;
}

// The f32 NCHW batches in `format`'s order and dtype, rounded by the test (test::half_bits).
std::vector<uint32_t> expected_words(const std::vector<uint32_t>& f32_nchw, const Shape& sample,
                                     const BatchFormat& format) {
  std::vector<float> v(f32_nchw.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = float_from_bits(f32_nchw[i]);
  const int64_t N = int64_t(v.size()) / sample.numel();
  if (format.channels_last) v = test::nchw_to_nhwc(v, N, sample[0], sample[1], sample[2]);
  std::vector<uint32_t> out(v.size());
  if (format.dtype == DType::f32) {
    for (size_t i = 0; i < v.size(); ++i) out[i] = float_bits(v[i]);
  } else {
    const std::vector<uint16_t> h = test::half_bits(v, format.dtype);
    std::copy(h.begin(), h.end(), out.begin());
  }
  return out;
}

}  // namespace

TEST_CASE("gpu-resident bf16 and f16 batches are the f32 ones rounded once, bit for bit, NCHW or channels-last",
          "[gpu]") {
  CNN_REQUIRE_GPU();
  struct Setup {
    const char* what;
    int64_t channels;
    LoaderMode mode;
    bool ten_crop;
    AugmentSpec augment;
  };
  AugmentSpec crop_flip;
  crop_flip.crop_size = 12;
  crop_flip.crop_padding = 3;
  crop_flip.hflip = true;
  const Setup setups[] = {{"train, full augmentation", 3, LoaderMode::train, false, full_augment()},
                          {"train, gray, crop and flip", 1, LoaderMode::train, false, crop_flip},
                          {"train, no augmentation", 3, LoaderMode::train, false, AugmentSpec{}},
                          {"eval, centre crop", 3, LoaderMode::eval, false, full_augment()},
                          {"eval, ten crops", 3, LoaderMode::eval, true, full_augment()}};
  for (const Setup& su : setups) {
    INFO(su.what);
    const Dataset d = make_synthetic_faces(21, 3, su.channels, 17, 18, 4);
    const Normalization norm = compute_normalization(d);
    CudaContext cuda;
    LoaderOptions o;
    o.batch_size = 6;  // 3 full batches and one of 3
    o.seed = 12;
    o.mode = su.mode;
    o.ten_crop = su.ten_crop;
    GpuDataset gd(d, o, norm, su.augment, cuda.ctx());
    const std::vector<int64_t> epochs = {0, 2};
    const std::vector<std::vector<uint32_t>> ref = gpu_batch_words(gd, cuda, epochs, o.batch_size, BatchFormat{});
    for (DType t : {DType::f32, DType::bf16, DType::f16}) {
      for (bool channels_last : {false, true}) {
        if (t == DType::f32 && !channels_last) continue;  // the reference itself
        INFO(to_string(t) << (channels_last ? " channels-last" : " NCHW"));
        const BatchFormat format{t, channels_last};
        const std::vector<std::vector<uint32_t>> got = gpu_batch_words(gd, cuda, epochs, o.batch_size, format);
        REQUIRE(got.size() == ref.size());
        for (size_t i = 0; i < ref.size(); ++i) {
          INFO("batch " << i);
          REQUIRE(got[i] == expected_words(ref[i], gd.output_shape(), format));
        }
      }
    }
    int64_t n = 0;
    DeviceFloats scratch = DeviceFloats::poisoned(1 << 16);
    CHECK_THROWS_WITH(gd.make_batch(0, scratch.data(), BatchFormat{DType::i32, false}, nullptr, n),
                      Catch::Matchers::Contains("f32, bf16 or f16, not i32"));
  }
}

TEST_CASE("gpu-resident make_batch accepts null labels and rejects batches out of range", "[gpu]") {
  CNN_REQUIRE_GPU();
  const Dataset d = make_synthetic_faces(10, 2, 1, 18, 18, 1);
  const Normalization norm = compute_normalization(d);
  CudaContext cuda;
  LoaderOptions o;
  o.batch_size = 4;
  GpuDataset gd(d, o, norm, full_augment(), cuda.ctx());
  DeviceFloats images = DeviceFloats::poisoned(4 * 16 * 16);
  int64_t n = -1;
  CHECK_THROWS_AS(gd.make_batch(0, images.data(), nullptr, n), Error);  // before start_epoch
  gd.start_epoch(0);
  gd.make_batch(2, images.data(), nullptr, n);
  CHECK(n == 2);
  CHECK(gd.batch_labels(2).size() == 2);
  CHECK_THROWS_AS(gd.make_batch(3, images.data(), nullptr, n), Error);
  cuda.synchronize();
  const std::vector<float> v = images.get();
  for (int64_t i = 0; i < 2 * 16 * 16; ++i) REQUIRE(std::isfinite(v[static_cast<size_t>(i)]));
}

TEST_CASE("gpu-resident data needs a cuda execution context", "[cpu]") {
  const Dataset d = make_synthetic_faces(4, 2, 1, 8, 8, 1);
  const Normalization norm = compute_normalization(d);
  CHECK_THROWS_AS(GpuDataset(d, LoaderOptions{}, norm, AugmentSpec{}, ExecContext::cpu(1)), Error);
}

TEST_CASE("fits() keeps a dataset that takes at most half of the free memory", "[cpu]") {
  const Dataset gray = make_synthetic_faces(10, 2, 1, 4, 4, 1);
  // 10 images: 16 pixel bytes + 4 (label) + 4 (one channel mean) + 8 (order index) each.
  CHECK(GpuDataset::resident_bytes(gray) == 10 * (16 + 4 + 4 + 8));
  CHECK(GpuDataset::fits(gray, 640));
  CHECK(GpuDataset::fits(gray, 641));
  CHECK_FALSE(GpuDataset::fits(gray, 639));
  CHECK_FALSE(GpuDataset::fits(gray, 0));
  const Dataset rgb = make_synthetic_faces(10, 2, 3, 4, 4, 1);
  CHECK(GpuDataset::resident_bytes(rgb) == 10 * (48 + 4 + 12 + 8));
  CHECK(GpuDataset::fits(rgb, 1440));
  CHECK_FALSE(GpuDataset::fits(rgb, 1439));
  CHECK(GpuDataset::fits(Dataset{}, 0));
}
