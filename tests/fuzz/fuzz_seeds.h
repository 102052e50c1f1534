// What every libFuzzer target here does in LLVMFuzzerInitialize: with CNN_FUZZ_WRITE_SEEDS=DIR it
// only writes its seed corpus into DIR (tools/run_fuzzer.sh does this first) and exits.
#pragma once

#include <cstdlib>
#include <string>

namespace cnn::fuzz {

inline void write_seeds_if_asked(void (*write_seeds)(const std::string& dir)) {
  if (const char* dir = std::getenv("CNN_FUZZ_WRITE_SEEDS")) {
    write_seeds(dir);
    std::exit(0);
  }
}

}  // namespace cnn::fuzz
