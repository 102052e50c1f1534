// A config value with its source location: the YAML-free tree every reader of a config sees.
// The YAML reader makes one (scalars typed by their YAML 1.2 core-schema form); a Schema
// (schema.h) checks it and returns a new tree whose scalars carry their declared types and whose
// absent keys hold their defaults, so typed reads (integer(), real(), ...) cannot fail on a
// validated tree: a mismatch there is a programming error, not a user error.
// Traps: text() is the scalar as written (or as a default was formatted) and is what the writer
// emits, so a resolved config keeps the user's spelling ("1.0e-4"); a reference into a map or list
// is invalidated when that same map or list grows.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace cnn {

class Value {
public:
  enum class Kind { null, boolean, integer, real, string, list, map };

  Value() = default;  // null
  static Value scalar(Kind kind, std::string text, Location where = {}, bool quoted = false);
  static Value list(Location where = {});
  static Value map(Location where = {});

  Kind kind() const { return m_kind; }
  bool is_null() const { return m_kind == Kind::null; }
  bool is_list() const { return m_kind == Kind::list; }
  bool is_map() const { return m_kind == Kind::map; }
  bool is_scalar() const { return !is_null() && !is_list() && !is_map(); }
  const std::string& text() const { return m_text; }  // scalars
  bool quoted() const { return m_quoted; }            // written in quotes: a string whatever it reads like

  // Typed reads of a validated tree (CNN_CHECK on a kind mismatch). real() also reads integers.
  bool boolean() const;
  int64_t integer() const;
  uint64_t uinteger() const;  // an integer declared unsigned (0 .. 2^64-1)
  double real() const;
  const std::string& string() const;
  std::pair<int64_t, int64_t> pair() const;  // an integer n (n, n) or a list [a, b]
  std::vector<std::string> strings() const;  // a list of strings
  std::vector<int64_t> integers() const;
  std::vector<double> reals() const;

  // Maps (entries in file order, defaults after) and lists.
  size_t size() const { return is_map() ? m_entries.size() : m_items.size(); }
  bool has(const std::string& key) const { return find(key) != nullptr; }
  const Value* find(const std::string& key) const;
  const Value& operator[](const std::string& key) const;  // CNN_CHECK: present
  const Value& operator[](size_t i) const;
  const std::vector<std::pair<std::string, Value>>& entries() const { return m_entries; }
  const std::vector<Value>& items() const { return m_items; }

  const Location& where() const { return m_where; }
  // Where the key holding this value was written (its own location when it has no key).
  const Location& key_where() const { return m_key_where.line ? m_key_where : m_where; }
  const std::string& path() const { return m_path; }  // "train.optimizer.lr", "layers[3].kernel"
  bool given() const { return m_given; }  // written in the file or a --set, not filled in as a default

  // "a map", "an empty list", "the string 'abc'", "the number 3", "the boolean true", "nothing"
  std::string describe() const;
  // ConfigError(where(), path(), message).
  [[noreturn]] void fail(const std::string& message) const;
  // fail("expected <what>, found <describe()>").
  [[noreturn]] void fail_expected(const std::string& what) const;

  // --- building (lib/config's reader, validator and overrides)
  Value& set(const std::string& key, Value v);  // replaces a present key in place, else appends
  Value& push_back(Value v);
  void set_kind(Kind kind) { m_kind = kind; }
  void set_where(Location where, Location key_where = {});
  void set_location_recursive(const Location& where);  // a whole --set value
  void set_path_recursive(const std::string& path);
  void set_given(bool given) { m_given = given; }
  std::vector<std::pair<std::string, Value>>& mutable_entries() { return m_entries; }
  std::vector<Value>& mutable_items() { return m_items; }

private:
  Kind m_kind = Kind::null;
  std::string m_text;
  bool m_quoted = false;
  bool m_given = true;
  Location m_where;
  Location m_key_where;
  std::string m_path;
  std::vector<std::pair<std::string, Value>> m_entries;  // map
  std::vector<Value> m_items;                            // list
};

// "a.b" (or "b" under the root), "a[3]".
std::string child_path(const std::string& parent, const std::string& key);
std::string item_path(const std::string& parent, size_t index);

// Limits of the YAML reader (README "Model file reference"): a file larger than kMaxYamlBytes, more
// than kMaxYamlNodes nodes (aliases counted expanded), aliases expanding to more than
// kMaxAliasNodes nodes in all, or nesting deeper than kMaxYamlDepth is a ConfigError.
constexpr size_t kMaxYamlBytes = size_t(4) << 20;
constexpr size_t kMaxYamlNodes = size_t(1) << 18;
constexpr size_t kMaxAliasNodes = size_t(1) << 16;
constexpr int kMaxYamlDepth = 64;

// Parses YAML text (one document) into a tree whose every value carries file:line:col. The text
// must be UTF-8 without control characters other than tab, CR and LF; duplicate keys are errors;
// a syntax error inside a flow collection also names where that collection was opened.
Value parse_yaml(const std::string& text, const std::string& file_name);
// Reads a regular file of at most kMaxYamlBytes (a FIFO or device is refused without being
// opened for reading) and parses it. Missing, unreadable or non-regular files are ConfigErrors.
Value load_yaml_file(const std::string& path);
// Block-style YAML (comments are not kept); short lists of scalars in flow style. parse_yaml reads
// the text back to an equal tree.
std::string to_yaml(const Value& value);

// Applies "a.b.c=value" (the CLI's --set) to a tree before it is validated. The value is parsed
// as YAML, located at "<--set>". Lists of maps with a `name` key can be addressed by name
// (layers.conv1.filters) or index (layers[0].filters, layers.0.filters). New keys may be created
// inside maps; the schema then rejects the unknown ones.
void apply_override(Value& root, const std::string& assignment);

}  // namespace cnn
