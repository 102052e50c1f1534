// Shared test helpers (see test_util.h).
#include "support/test_util.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include <unistd.h>

#include <ctime>

#include "core/rng.h"

namespace cnn::test {

std::vector<float> random_floats(size_t n, uint64_t seed, float lo, float hi) {
  Rng rng(seed, static_cast<uint64_t>(RngStream::test));
  std::vector<float> v(n);
  for (auto& x : v) x = rng.uniform(lo, hi);
  return v;
}

std::vector<double> random_doubles(size_t n, uint64_t seed, double lo, double hi) {
  Rng rng(seed, static_cast<uint64_t>(RngStream::test));
  std::vector<double> v(n);
  for (auto& x : v) x = lo + (hi - lo) * (static_cast<double>(rng.next_u64() >> 11) / 9007199254740992.0);
  return v;
}

template <typename T>
static std::string compare_impl(const T* a, const T* b, size_t n, Tolerance tol) {
  size_t bad = 0, worst = 0;
  double worst_excess = -1.0;
  for (size_t i = 0; i < n; ++i) {
    double da = a[i], db = b[i];
    double limit = tol.atol + tol.rtol * std::fabs(db);
    double err = std::fabs(da - db);
    if (!(err <= limit)) {  // NaN fails
      ++bad;
      double excess = std::isnan(err) ? 1e300 : err - limit;
      if (excess > worst_excess) {
        worst_excess = excess;
        worst = i;
      }
    }
  }
  if (!bad) return "";
  return fmt::format("{} of {} elements differ; worst at [{}]: got {:.9g}, expected {:.9g} (atol {}, rtol {})", bad,
                     n, worst, static_cast<double>(a[worst]), static_cast<double>(b[worst]), tol.atol, tol.rtol);
}

std::string compare(const float* a, const float* b, size_t n, Tolerance tol) { return compare_impl(a, b, n, tol); }
std::string compare(const double* a, const double* b, size_t n, Tolerance tol) { return compare_impl(a, b, n, tol); }

std::vector<double> numeric_gradient(std::vector<double>& x, const std::function<double()>& f, double h) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    double keep = x[i];
    x[i] = keep + h;
    double fp = f();
    x[i] = keep - h;
    double fm = f();
    x[i] = keep;
    g[i] = (fp - fm) / (2 * h);
  }
  return g;
}

TempDir::TempDir(const std::string& prefix) {
  Rng rng(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(this)) ^ static_cast<uint64_t>(std::time(nullptr)),
          static_cast<uint64_t>(::getpid()));
  for (;;) {
    m_path = std::filesystem::temp_directory_path() / fmt::format("{}-{:016x}", prefix, rng.next_u64());
    if (std::filesystem::create_directories(m_path)) break;
  }
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(m_path, ec);
}

void write_text_file(const std::filesystem::path& p, const std::string& text) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream f(p, std::ios::binary);
  f << text;
}

std::string read_text_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace cnn::test
