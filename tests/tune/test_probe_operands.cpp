// The probes' operand values and their comparison (tune/probe_operands.h): the normals have N(0,1)'s
// moments and tails, each value depends on (seed, index) alone (not on the count asked for nor the
// thread count), seeds differ; the chunked relative L2 equals the plain serial sum within rounding
// and is the same on any thread count. A hidden case prints the per-value costs (run by hand).
#include <chrono>
#include <cmath>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include "core/rng.h"
#include "support/catch.h"
#include "tune/probe_operands.h"

using namespace cnn;

namespace {

// The obvious serial relative L2 in double: what the chunked one must equal within rounding.
double serial_relative_l2(const std::vector<float>& got, const std::vector<float>& ref) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = double(got[i]) - double(ref[i]);
    diff += d * d;
    norm += double(ref[i]) * double(ref[i]);
  }
  return std::sqrt(diff / norm);
}

}  // namespace

TEST_CASE("probe normals have the mean, spread and tails of stddev * N(0,1)", "[cpu]") {
  const int64_t n = int64_t(1) << 20;
  const float stddev = 2.0f;
  const std::vector<float> v = probe_normals(n, stddev, 7);
  REQUIRE(v.size() == size_t(n));
  double sum = 0, sq = 0, fourth = 0;
  int64_t beyond_2sd = 0, beyond_3sd = 0, not_finite = 0;
  for (float f : v) {
    not_finite += !std::isfinite(f);
    const double z = double(f) / stddev;
    sum += z, sq += z * z, fourth += z * z * z * z;
    beyond_2sd += std::fabs(z) > 2.0;
    beyond_3sd += std::fabs(z) > 3.0;
  }
  REQUIRE(not_finite == 0);
  const double mean = sum / double(n), var = sq / double(n) - mean * mean;
  // Bounds of about 5 standard errors at n = 2^20 (mean 1e-3, variance 1.4e-3, kurtosis 1e-2).
  CHECK(std::fabs(mean) < 5e-3);
  CHECK(std::fabs(var - 1.0) < 7e-3);
  CHECK(std::fabs(fourth / double(n) - 3.0) < 0.06);  // a sum of few uniforms would give < 2.8
  CHECK(double(beyond_2sd) / double(n) == Approx(0.0455).epsilon(0.03));
  CHECK(double(beyond_3sd) / double(n) == Approx(0.0027).epsilon(0.1));
}

TEST_CASE("probe values depend on the seed and the index alone, not on the count or the thread count", "[cpu]") {
  const int64_t n = 200001;  // odd, and large enough to be split among threads
  const std::vector<float> one = probe_normals(n, 1.0f, 3, 1);
  CHECK(one == probe_normals(n, 1.0f, 3, 1));
  for (int threads : {2, 3, 4}) {
    INFO(threads << " threads");
    CHECK(probe_normals(n, 1.0f, 3, threads) == one);
  }
  // A shorter fill is the prefix of a longer one (the last value of an odd count included).
  const std::vector<float> head = probe_normals(7, 1.0f, 3, 1);
  CHECK(head == std::vector<float>(one.begin(), one.begin() + 7));
  // Another seed, or the next one, gives other values.
  for (uint64_t seed : {uint64_t(4), uint64_t(3 + (uint64_t(1) << 32))}) {
    const std::vector<float> other = probe_normals(n, 1.0f, seed, 2);
    int64_t equal = 0;
    for (int64_t i = 0; i < n; ++i) equal += other[size_t(i)] == one[size_t(i)];
    CHECK(equal < 10);
  }
  // stddev scales the same draws.
  const std::vector<float> scaled = probe_normals(n, std::ldexp(1.0f, -17), 3, 4);
  for (int64_t i = 0; i < n; i += 997) CHECK(scaled[size_t(i)] == std::ldexp(one[size_t(i)], -17));

  std::vector<float> u1(static_cast<size_t>(n)), u4(static_cast<size_t>(n));
  fill_probe_uniforms(u1.data(), n, -0.5f, 0.5f, 9, 1);
  fill_probe_uniforms(u4.data(), n, -0.5f, 0.5f, 9, 4);
  CHECK(u1 == u4);
  double sum = 0;
  int64_t outside = 0;
  for (float f : u1) {
    outside += !(f >= -0.5f && f < 0.5f);
    sum += f;
  }
  CHECK(outside == 0);
  CHECK(std::fabs(sum / double(n)) < 5e-3);
}

TEST_CASE("the chunked relative L2 equals the serial sum within rounding on any thread count", "[cpu]") {
  const int64_t n = 5 * kRelativeL2Chunk + 123;  // a partial last chunk
  const std::vector<float> ref = probe_normals(n, 1.0f, 11);
  std::vector<float> got = probe_normals(n, 1e-3f, 12);
  for (int64_t i = 0; i < n; ++i) got[size_t(i)] += ref[size_t(i)];
  const double serial = serial_relative_l2(got, ref);
  const double one = relative_l2(got, ref, 1);
  CHECK(one == Approx(serial).epsilon(1e-12));
  CHECK(one == Approx(1e-3).epsilon(0.01));
  for (int threads : {2, 3, 8}) CHECK(relative_l2(got, ref, threads) == one);  // bit for bit
  // NaN in the last chunk; sizes that differ; a zero reference.
  std::vector<float> nan = got;
  nan.back() = std::numeric_limits<float>::quiet_NaN();
  CHECK(std::isnan(relative_l2(nan, ref, 4)));
  CHECK(std::isinf(relative_l2(std::vector<float>(got.begin(), got.end() - 1), ref, 4)));
  const std::vector<float> zeros(static_cast<size_t>(n), 0.0f);
  CHECK(relative_l2(zeros, zeros, 4) == 0);
  CHECK(std::isinf(relative_l2(got, zeros, 4)));
}

TEST_CASE("probe operand costs per value: the former serial normals against the parallel ones (prints)",
          "[.][bench]") {
  using Clock = std::chrono::steady_clock;
  auto ms_since = [](Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); };
  const int64_t n = 256 * 32 * 28 * 28;  // fashion_cnn's largest activation at batch 256
  std::vector<float> v(static_cast<size_t>(n));
  Clock::time_point t = Clock::now();
  Rng rng(1, static_cast<uint64_t>(RngStream::test));
  for (float& f : v) f = rng.normal();
  const double philox = ms_since(t);
  WARN(fmt::format("{} values: serial Philox + Box-Muller (before) {:.1f} ms ({:.1f} ns a value)", n, philox,
                   philox * 1e6 / double(n)));
  for (int threads : {1, 0}) {
    t = Clock::now();
    fill_probe_normals(v.data(), n, 1.0f, 1, threads);
    const double normals = ms_since(t);
    std::vector<float> w = v;
    t = Clock::now();
    const double e = relative_l2(v, w, threads);
    const double l2 = ms_since(t);
    WARN(fmt::format("{} thread(s): probe normals {:.1f} ms ({:.2f} ns a value), relative L2 {:.1f} ms ({})",
                     threads == 0 ? std::string("all") : std::to_string(threads), normals, normals * 1e6 / double(n),
                     l2, e));
  }
}
