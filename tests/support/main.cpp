// The one main() of every test executable (Catch2 2 and 3 alike).
#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_session.hpp>
#else
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#endif

#include <cstdlib>

// CNN_DATA_CACHE=none unless the caller set it: no test (nor the cnn-train the end-to-end tests
// start) reads or fills the user's decoded-data cache; tests/data/test_data_cache.cpp sets its own.
int main(int argc, char* argv[]) {
  setenv("CNN_DATA_CACHE", "none", 0);
  return Catch::Session().run(argc, argv);
}
