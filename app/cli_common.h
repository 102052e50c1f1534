// What every program shares: the exception-to-exit-code mapping ("<program>: error: ..."; 2 for
// usage and config errors, 1 for runtime failures), `--verbose` (debug logging and the library's
// source location after an error message), version text, logging set-up, option validators.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "config/model_spec.h"

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

// --autotune-cache PATH|none, --workspace-mb N and --autotune-tolerance X on `cli`; after parsing,
// autotune_overrides() turns them into train.autotune.* config overrides (so the run's config,
// config.yaml and every data-parallel rank see the same values; no environment in between).
struct AutotuneFlags {
  std::string cache;
  long long workspace_mb = -1;
  double tolerance = -1;  // <= 0: the library default
};
void add_autotune_flags(CLI::App& cli, AutotuneFlags& flags);
// The flags as config overrides (train.autotune.*), so config.yaml records them.
std::vector<std::string> autotune_overrides(const AutotuneFlags& flags);
// The flags alone (cnn-bench conv, which has no model file).
AutotuneSpec autotune_spec(const AutotuneFlags& flags);

// --precision P on `cli` (train.precision); what it says after `default_text`. Not checked here:
// precision_override() makes it the --set override "train.precision=P" (nothing when not given),
// so the model file's schema checks the value and names the allowed ones.
void add_precision_option(CLI::App& cli, std::string& precision, const char* default_text);
std::vector<std::string> precision_override(const std::string& precision);

}  // namespace cnn::app
