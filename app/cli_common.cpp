// Shared program scaffolding (see cli_common.h).
#include "cli_common.h"

#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <cstdlib>
#include <iostream>

#include "core/device.h"
#include "core/error.h"
#include "ops/blas_cpu.h"
#include "tune/accuracy_tolerance.h"

namespace cnn::app {

std::string version_text(const char* program) {
  return fmt::format("{} {} (cnn-train toolkit; CUDA: {}, OpenCV: {}, MPI: {})", program, CNN_VERSION,
#ifdef CNN_WITH_CUDA
                     "yes",
#else
                     "no",
#endif
#ifdef CNN_WITH_OPENCV
                     "yes",
#else
                     "no",
#endif
#ifdef CNN_WITH_MPI
                     "yes"
#else
                     "no"
#endif
  );
}

void add_version_flag(CLI::App& cli, const char* program) {
  cli.set_version_flag("--version", version_text(program));
}

static bool g_verbose = false;  // app-level: set once by guarded_main's parse

bool verbose() { return g_verbose; }

void setup_logging(bool quiet) {
  auto logger = spdlog::stderr_color_mt("cnn");
  logger->set_pattern("%^%l%$: %v");
  const auto all = g_verbose ? spdlog::level::debug : spdlog::level::info;
  logger->set_level(all);
  logger->sinks().front()->set_level(quiet ? spdlog::level::warn : all);
  spdlog::set_default_logger(logger);
}

CLI::Validator at_least(long long lowest) {
  return CLI::Validator(
      [lowest](std::string& text) -> std::string {
        long long v = 0;
        if (!CLI::detail::lexical_cast(text, v)) return fmt::format("expected an integer, found '{}'", text);
        if (v < lowest) return fmt::format("expected an integer >= {}, found {}", lowest, v);
        return "";
      },
      fmt::format("INT>={}", lowest));
}

void add_autotune_flags(CLI::App& cli, AutotuneFlags& flags) {
  cli.add_option("--autotune-cache", flags.cache,
                 "autotune decisions file, or none (default $CNN_AUTOTUNE_CACHE, else ~/.cache/cnn-train/autotune.json)");
  const AutotuneSpec defaults;  // train.autotune's declared defaults
  cli.add_option("--workspace-mb", flags.workspace_mb,
                 fmt::format("most scratch MiB one conv algorithm may take (default {})", defaults.workspace_mb))
      ->check(CLI::NonNegativeNumber);
  cli.add_option("--autotune-tolerance", flags.tolerance,
                 fmt::format("largest relative L2 difference from the plain FP32 reference an autotuned conv algorithm "
                             "may have (default: {})",
                             defaults.tolerance > 0 ? fmt::format("{}", defaults.tolerance)
                                                    : fmt::format("each op's own; {} for FP32 convolutions", kConvAccuracyTolerance)))
      ->check(CLI::PositiveNumber);
}

void add_precision_option(CLI::App& cli, std::string& precision, const char* default_text) {
  cli.add_option("--precision", precision,
                 fmt::format("fp32 | tf32 | bf16 | fp16: how activations are stored and products taken (train.precision; default {})",
                             default_text));
}

std::vector<std::string> precision_override(const std::string& precision) {
  if (precision.empty()) return {};
  return {"train.precision=" + precision};
}

std::vector<std::string> autotune_overrides(const AutotuneFlags& flags) {
  std::vector<std::string> sets;
  if (!flags.cache.empty()) sets.push_back("train.autotune.cache=" + flags.cache);
  if (flags.workspace_mb >= 0) sets.push_back(fmt::format("train.autotune.workspace_mb={}", flags.workspace_mb));
  if (flags.tolerance > 0) sets.push_back(fmt::format("train.autotune.tolerance={}", flags.tolerance));
  return sets;
}

AutotuneSpec autotune_spec(const AutotuneFlags& flags) { return parse_autotune_overrides(autotune_overrides(flags)); }

// The library's source location ("(gzip.cpp:18)") of an error, with --verbose only.
static std::string location_suffix(const std::exception& e) {
  const auto* err = dynamic_cast<const Error*>(&e);
  if (!g_verbose || !err || err->source_location().empty()) return "";
  return " (" + err->source_location() + ")";
}

CLI::Validator not_negative() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const size_t first = text.find_first_not_of(" \t");
        if (first != std::string::npos && text[first] == '-')
          return fmt::format("expected an integer >= 0, found {}", text);
        return "";
      },
      "INT>=0");
}

// OpenBLAS picks its kernels from OPENBLAS_CORETYPE when it is loaded, before main; an OpenBLAS
// older than the CPU falls back to SSE3 kernels (blas_better_core). Then the program starts itself
// again once with the family the CPU runs (the variable set, so never twice); a user's own
// OPENBLAS_CORETYPE, whatever its value, is left alone. If the restart fails, it runs on as it is.
static void restart_with_better_blas_kernels(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE")) return;
  const std::string core = blas_better_core();
  if (core.empty() || setenv("OPENBLAS_CORETYPE", core.c_str(), 1) != 0) return;
  execv("/proc/self/exe", argv);
  unsetenv("OPENBLAS_CORETYPE");
}

int guarded_main(const char* program, CLI::App& cli, int argc, char** argv, const std::function<int()>& body) {
  restart_with_better_blas_kernels(argv);
  const char* help = "debug logging; error messages end with the source location that raised them";
  cli.add_flag("--verbose", g_verbose, help);
  for (CLI::App* sub : cli.get_subcommands([](CLI::App*) { return true; })) sub->add_flag("--verbose", g_verbose, help);
  try {
    cli.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return cli.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return cli.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return cli.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << program << ": error: " << e.what() << "\n(run '" << program << " --help' for usage)\n";
    return 2;
  }
  try {
    return body();
  } catch (const ConfigError& e) {
    std::cerr << program << ": error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << program << ": error: " << e.what() << location_suffix(e) << "\n";
    return 1;
  }
}

}  // namespace cnn::app
