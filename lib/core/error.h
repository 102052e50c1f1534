// Exceptions of the library: cnn::Error (runtime) and cnn::ConfigError (file:line:col + key path).
// The library throws; only app/ decides to exit. CNN_CHECK formats its message with fmt, and the
// message is only built when the check fails, so checks are cheap in hot paths.
// Trap: what() is the message a user reads; the C++ source location of CNN_THROW/CNN_CHECK (and
// the CUDA/cuDNN/NCCL/MPI checks) is kept apart in source_location(), printed only with --verbose.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace cnn {

class Error : public std::runtime_error {
public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
  Error(const std::string& what, std::string source_location)
      : std::runtime_error(what), m_source_location(std::move(source_location)) {}
  // "gzip.cpp:18" where the library threw it; "" when unknown.
  const std::string& source_location() const { return m_source_location; }

private:
  std::string m_source_location;
};

// Where a value came from in a config file. line/col are 1-based; 0 means unknown.
struct Location {
  std::string file;
  int line = 0;
  int col = 0;
  std::string to_string() const;  // "file:line:col", or "file", or "<unknown>"
};

// A problem with user input: the model file, a --set override, a CLI flag. Exit code 2.
class ConfigError : public Error {
public:
  ConfigError(Location where, std::string key_path, std::string message);
  const Location& where() const { return m_where; }
  const std::string& key_path() const { return m_key_path; }
  const std::string& message() const { return m_message; }

private:
  Location m_where;
  std::string m_key_path;
  std::string m_message;
};

[[noreturn]] void throw_error(const char* file, int line, const std::string& message);

// Edit distance (Levenshtein), used for "did you mean" suggestions.
int edit_distance(const std::string& a, const std::string& b);
// The candidate closest to `word`, or "" when none is close enough to be a plausible typo.
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);
// ", did you mean 'x'?" or "" (for appending to messages).
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);
// The first `shown` of `names` joined by ", " and a count of the rest ("a, b, c and 99997 more"):
// a list read from a file goes into a message bounded, however many entries the file holds.
std::string join_some(const std::vector<std::string>& names, size_t shown);
// `text` itself when it has at most `max_bytes` bytes, else its first bytes up to a UTF-8 character
// boundary at or below max_bytes, and "...": a name or value read from a file goes into a message
// bounded, and stays valid UTF-8 (a JSON report of the message would otherwise refuse to print).
std::string clip_text(const std::string& text, size_t max_bytes);

}  // namespace cnn

#define CNN_THROW(...) ::cnn::throw_error(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__))

#define CNN_CHECK(cond, ...)                                                                    \
  do {                                                                                          \
    if (!(cond)) {                                                                              \
      ::cnn::throw_error(__FILE__, __LINE__,                                                    \
                         ::fmt::format("check failed: {}: {}", #cond, ::fmt::format(__VA_ARGS__))); \
    }                                                                                           \
  } while (0)
