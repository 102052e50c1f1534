// The process clock (see process_clock.h): the OS's start time, read once at the first static
// initialiser and anchored on the steady clock.
#include "core/process_clock.h"

#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

namespace cnn {

namespace {

struct Anchor {
  std::chrono::steady_clock::time_point at;  // steady time of the static initialiser
  double age_s = 0;                          // process age at that moment
  double tick_s = 0;                         // 0: start time unknown
};

// starttime (field 22 of /proc/self/stat, ticks since boot) against CLOCK_BOOTTIME now; the
// command name (field 2) may hold spaces and parentheses, so fields are counted after the last ')'.
bool read_age(double& age_s, double& tick_s) {
  std::FILE* f = std::fopen("/proc/self/stat", "r");
  if (!f) return false;
  char buf[2048];
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* p = std::strrchr(buf, ')');
  if (!p) return false;
  unsigned long long start_ticks = 0;
  int field = 2;
  for (const char* q = p + 1; *q; ++q) {
    if (*q != ' ') continue;
    if (++field == 22) {
      if (std::sscanf(q + 1, "%llu", &start_ticks) != 1) return false;
      break;
    }
  }
  const long hz = ::sysconf(_SC_CLK_TCK);
  timespec now{};
  if (field != 22 || hz <= 0 || ::clock_gettime(CLOCK_BOOTTIME, &now) != 0) return false;
  tick_s = 1.0 / double(hz);
  // starttime is truncated to a tick: the start lies within the tick after it; take the middle.
  const double start_s = double(start_ticks) * tick_s + 0.5 * tick_s;
  age_s = double(now.tv_sec) + 1e-9 * double(now.tv_nsec) - start_s;
  if (age_s < 0) age_s = 0;
  return true;
}

Anchor make_anchor() {
  Anchor a;
  a.at = std::chrono::steady_clock::now();
  if (!read_age(a.age_s, a.tick_s)) a.age_s = a.tick_s = 0;
  return a;
}

Anchor& anchor() {
  static Anchor a = make_anchor();  // first use: the initialiser below, or any earlier caller
  return a;
}

// Before the other static initialisers of the program (priority 101 runs first among its own).
__attribute__((constructor(101))) void anchor_at_static_init() { anchor(); }

}  // namespace

double process_seconds() {
  const Anchor& a = anchor();
  return a.age_s + std::chrono::duration<double>(std::chrono::steady_clock::now() - a.at).count();
}

double process_static_init_seconds() { return anchor().age_s; }
bool process_start_known() { return anchor().tick_s > 0; }
double process_start_resolution() { return anchor().tick_s; }

}  // namespace cnn
