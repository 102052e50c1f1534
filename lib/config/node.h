// A YAML-free config tree with source locations: the rest of the library reads configs only
// through this. Strictness works by bookkeeping: every getter records the key it was asked for
// (present or not); check_unknown_keys() then rejects any key nobody asked for, suggesting the
// closest asked-for key. Getters with a default write the default into the tree, so after
// parsing the tree is the fully resolved config and to_yaml() writes it back out.
// Traps: call check_unknown_keys() only after every reader of a map has run; a reference from
// find/at/set/get into a map is invalidated when that same map gains a key (a fallback written). A null node (`key:`
// with no value) counts as absent for getters with a fallback, and reads as an empty map.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace cnn {

enum class NodeKind { null, scalar, sequence, map };

class ConfigNode {
public:
  ConfigNode() = default;
  static ConfigNode scalar(std::string value, Location where = {}, std::string path = "");
  static ConfigNode sequence(Location where = {}, std::string path = "");
  static ConfigNode map(Location where = {}, std::string path = "");

  NodeKind kind() const { return m_kind; }
  bool is_null() const { return m_kind == NodeKind::null; }
  bool is_scalar() const { return m_kind == NodeKind::scalar; }
  bool is_sequence() const { return m_kind == NodeKind::sequence; }
  bool is_map() const { return m_kind == NodeKind::map; }
  const Location& where() const { return m_where; }
  const std::string& path() const { return m_path; }  // "train.optimizer.lr", "layers[3].kernel"
  // Where the key holding this node was written (its own location when it has no key).
  const Location& key_where() const { return m_key_where.line ? m_key_where : m_where; }
  bool quoted() const { return m_quoted; }  // a scalar written in quotes: always a string
  // "a map", "a list", "an empty list", "the string 'abc'", "the number 3", "the boolean true",
  // "nothing"
  std::string describe() const;

  // Throws ConfigError(where(), path(), message) at this node.
  [[noreturn]] void fail(const std::string& message) const;
  // Throw "expected <what>, found <describe()>" unless the node has that kind.
  void expect_map(const std::string& what = "a map") const;
  void expect_sequence(const std::string& what = "a list") const;

  // --- scalars: strict conversions; errors say what was expected and found. Quoted scalars are
  // strings only. Integers are plain decimal ([-+]?[0-9]+): "3.0", "1e3" and "0x10" are not
  // integers. Numbers follow YAML 1.2 (1, -2.5, 1e-4, .5, .inf, .nan). T of as/get/get_list is
  // one of std::string, int64_t, int, uint64_t (rejects negatives), double, float, bool.
  const std::string& as_string() const;
  int64_t as_int() const;
  double as_double() const;
  bool as_bool() const;  // true/false (also True/TRUE/False/FALSE)
  template <typename T>
  T as() const;  // std::string, int64_t, int, double, float, bool

  // --- maps
  bool has(const std::string& key);              // present and not null; records the key as known
  ConfigNode* find(const std::string& key);      // null when absent; records the key
  ConfigNode& at(const std::string& key);        // required: "missing required key 'x'"
  std::vector<std::string> keys() const;         // in file order
  template <typename T>
  T get(const std::string& key);                 // required scalar
  template <typename T>
  T get(const std::string& key, const T& fallback);  // optional; the fallback is written into the tree
  template <typename T>
  std::vector<T> get_list(const std::string& key);   // required list of scalars
  template <typename T>
  std::vector<T> get_list(const std::string& key, const std::vector<T>& fallback);
  // An int that may be written as a scalar or as a pair [h, w] (kernel, stride, padding).
  std::pair<int64_t, int64_t> get_pair(const std::string& key, std::pair<int64_t, int64_t> fallback);
  // A string that must be one of `choices`: "expected one of a, b, c, found 'x', did you mean 'b'?"
  std::string get_choice(const std::string& key, const std::vector<std::string>& choices);
  std::string get_choice(const std::string& key, const std::vector<std::string>& choices,
                         const std::string& fallback);
  // Sets or replaces a child (used for defaults, overrides and writing configs out). A null node
  // becomes a map. Does not mark the key as known.
  ConfigNode& set(const std::string& key, ConfigNode value);
  void erase(const std::string& key);

  // --- sequences
  size_t size() const;
  ConfigNode& operator[](size_t i);
  const ConfigNode& operator[](size_t i) const;
  ConfigNode& push_back(ConfigNode value);

  // Marks keys as known without reading them (e.g. keys handled by another reader).
  void mark_known(const std::vector<std::string>& keys);
  // Throws ConfigError for the first key of this map that no getter asked for, with a
  // "did you mean" among the keys that were asked for. Recurse=true checks child maps and the
  // maps inside child sequences too, whether or not anything read them: a map nobody read
  // reports its first key. Keys not asked for are reported before any child is entered.
  void check_unknown_keys(bool recurse = true) const;

  // Children by key, in file order (maps) — for writers and generic walks.
  const std::vector<std::pair<std::string, ConfigNode>>& entries() const { return m_entries; }
  const std::vector<ConfigNode>& items() const { return m_items; }

  // Applies "a.b.c=value" (the CLI's --set). The value is parsed as YAML (so lists work), its
  // location is "<--set>". Sequences of maps with a `name` key can be addressed by name
  // (layers.conv1.filters) or by index (layers[0].filters or layers.0.filters). Creating a new
  // key is allowed only where the tree is a map; the strict checks later catch unknown keys.
  void apply_override(const std::string& assignment);

  // Deep copy with bookkeeping cleared.
  ConfigNode clone() const;

private:
  void set_path_recursive(const std::string& path);
  void set_location_recursive(const Location& where);
  NodeKind m_kind = NodeKind::null;
  std::string m_value;  // scalar text
  bool m_quoted = false;  // scalar was quoted in YAML: never a number/bool
  Location m_where;
  Location m_key_where;  // where the key holding this node was written (maps only)
  std::string m_path;
  std::vector<std::pair<std::string, ConfigNode>> m_entries;  // map
  std::vector<ConfigNode> m_items;                            // sequence
  std::set<std::string> m_known;                              // keys asked for
  friend class YamlReader;
  friend ConfigNode make_quoted_scalar(std::string, Location, std::string);
};

// A scalar that reads as a string whatever its text (what a quoted YAML scalar becomes).
ConfigNode make_quoted_scalar(std::string value, Location where, std::string path);

// Parses YAML text into a tree; every node carries file:line:col. Syntax errors are ConfigErrors
// with the location yaml-cpp reports. Duplicate keys in a map are errors.
ConfigNode parse_yaml(const std::string& text, const std::string& file_name);
ConfigNode load_yaml_file(const std::string& path);  // missing/unreadable file: ConfigError
// Writes a tree as block-style YAML (comments are not preserved); short lists of scalars go in
// flow style. parse_yaml reads the text back to an equal tree.
std::string to_yaml(const ConfigNode& node);

}  // namespace cnn
