// What every program shares: the exception-to-exit-code mapping ("<program>: error: ..."; 2 for
// usage and config errors, 1 for runtime failures), version text and logging set-up.
#pragma once

#include <functional>
#include <string>

namespace CLI {
class App;
}

namespace cnn::app {

// Parses argv with `cli`, then runs body; every exception becomes a message and an exit code.
int guarded_main(const char* program, CLI::App& cli, int argc, char** argv, const std::function<int()>& body);
std::string version_text(const char* program);
void add_version_flag(CLI::App& cli, const char* program);
// spdlog to stderr; quiet shows warnings and errors only.
void setup_logging(bool quiet);

// --autotune-cache PATH|none, --workspace-mb N and --autotune-tolerance X on `cli`;
// export_autotune_flags() (after parsing) passes them to the library as CNN_AUTOTUNE_CACHE /
// CNN_WORKSPACE_MB / CNN_AUTOTUNE_TOLERANCE (train/autotune.h), which
// every device set-up of the process reads, data-parallel ranks included.
struct AutotuneFlags {
  std::string cache;
  long long workspace_mb = -1;
  double tolerance = -1;  // <= 0: the library default
};
void add_autotune_flags(CLI::App& cli, AutotuneFlags& flags);
void export_autotune_flags(const AutotuneFlags& flags);

}  // namespace cnn::app
