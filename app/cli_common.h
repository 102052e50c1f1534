// What every program shares: the exception-to-exit-code mapping ("<program>: error: ..."; 2 for
// usage and config errors, 1 for runtime failures), `--verbose` (debug logging and the library's
// source location after an error message), version text, logging set-up, option validators.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace cnn::app {

// Adds --verbose to `cli` and each of its subcommands, parses argv, then runs body; every
// exception becomes a message and an exit code.
int guarded_main(const char* program, CLI::App& cli, int argc, char** argv, const std::function<int()>& body);
std::string version_text(const char* program);
void add_version_flag(CLI::App& cli, const char* program);
// The default logger writes to stderr. The logger passes info (debug with --verbose), so a file
// sink added later (a run's train.log) gets every line; quiet raises the console's threshold to
// warnings only.
void setup_logging(bool quiet);
bool verbose();  // --verbose was given

// An integer option's check: at least `lowest` ("--epochs: expected an integer >= 1, found 0").
CLI::Validator at_least(long long lowest);
// An unsigned option's check (CLI11 would wrap "-1" to 2^64-1): "expected an integer >= 0, found -1".
CLI::Validator not_negative();

// --autotune-cache PATH|none, --workspace-mb N and --autotune-tolerance X on `cli`;
// export_autotune_flags() (after parsing) passes them to the library as CNN_AUTOTUNE_CACHE /
// CNN_WORKSPACE_MB / CNN_AUTOTUNE_TOLERANCE (tune/autotune.h), which
// every device set-up of the process reads, data-parallel ranks included.
struct AutotuneFlags {
  std::string cache;
  long long workspace_mb = -1;
  double tolerance = -1;  // <= 0: the library default
};
void add_autotune_flags(CLI::App& cli, AutotuneFlags& flags);
void export_autotune_flags(const AutotuneFlags& flags);

// --precision P on `cli` (train.precision); what it says after `default_text`. Not checked here:
// precision_override() makes it the --set override "train.precision=P" (nothing when not given),
// so the model file's schema checks the value and names the allowed ones.
void add_precision_option(CLI::App& cli, std::string& precision, const char* default_text);
std::vector<std::string> precision_override(const std::string& precision);

}  // namespace cnn::app
