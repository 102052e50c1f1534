// What every libFuzzer target here shares: how a finding is reported, and the seed mode (with
// CNN_FUZZ_WRITE_SEEDS=DIR the binary writes its seed corpus into DIR and exits; run_fuzzer.sh
// starts each run from it). Trap: a finding must abort, so libFuzzer saves the input.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"

namespace cnn::fuzz {

// Runs f; false when it throws cnn::Error (the reader's refusal, which is fine), true otherwise.
template <typename F>
bool accepted(F&& f) {
  try {
    f();
    return true;
  } catch (const Error&) {
    return false;
  }
}

[[noreturn]] inline void finding(const char* target, const char* what) {
  std::fprintf(stderr, "%s: %s\n", target, what);
  std::abort();
}

inline void write_seeds_if_asked(void (*write_seeds)(const std::string& dir)) {
  if (const char* dir = std::getenv("CNN_FUZZ_WRITE_SEEDS")) {
    write_seeds(dir);
    std::exit(0);
  }
}

}  // namespace cnn::fuzz

// Defines LLVMFuzzerInitialize for a target whose seeds `write_seeds(dir)` writes.
#define CNN_FUZZ_SEEDS(write_seeds)                      \
  extern "C" int LLVMFuzzerInitialize(int*, char***) {  \
    ::cnn::fuzz::write_seeds_if_asked(write_seeds);      \
    return 0;                                            \
  }
