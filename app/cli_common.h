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

}  // namespace cnn::app
