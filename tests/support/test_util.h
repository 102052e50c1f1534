// Helpers shared by the test suites: seeded random data, tolerance comparison with a readable
// failure message, temporary directories, and finite-difference gradient checks.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "support/tolerance.h"

namespace cnn::test {

// Uniform values in [lo, hi), seeded (never zeros: they hide unwritten outputs).
std::vector<float> random_floats(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f);
std::vector<double> random_doubles(size_t n, uint64_t seed, double lo = -1.0, double hi = 1.0);

// "" when every element satisfies |a-b| <= atol + rtol*|b|; else a description of the worst one.
std::string compare(const float* a, const float* b, size_t n, Tolerance tol);
std::string compare(const double* a, const double* b, size_t n, Tolerance tol);
inline std::string compare(const std::vector<float>& a, const std::vector<float>& b, Tolerance tol) {
  return a.size() != b.size() ? "size mismatch" : compare(a.data(), b.data(), a.size(), tol);
}
inline std::string compare(const std::vector<double>& a, const std::vector<double>& b, Tolerance tol) {
  return a.size() != b.size() ? "size mismatch" : compare(a.data(), b.data(), a.size(), tol);
}

// Central-difference gradient of the scalar f with respect to every element of x (modified in
// place and restored): grad[i] = (f(x+h e_i) - f(x-h e_i)) / 2h.
std::vector<double> numeric_gradient(std::vector<double>& x, const std::function<double()>& f,
                                     double h = kFdStep);

// Best of `runs` timed calls (after one warm-up) in ms, for hidden [bench] tests: on a shared
// 2-core machine the mean mostly measures the neighbours.
template <typename F>
double best_of_ms(F&& f, int runs = 20) {
  f();
  double best = 1e300;
  for (int i = 0; i < runs; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

// A fresh empty directory under the system temp dir, removed when the object dies.
class TempDir {
public:
  explicit TempDir(const std::string& prefix = "cnn-test");
  ~TempDir();
  const std::filesystem::path& path() const { return m_path; }
  std::filesystem::path operator/(const std::string& name) const { return m_path / name; }

private:
  std::filesystem::path m_path;
};

void write_text_file(const std::filesystem::path& p, const std::string& text);
std::string read_text_file(const std::filesystem::path& p);

}  // namespace cnn::test
