// Declarations of config keys: each key's name, type with its allowed values or range, default and
// one line of meaning. One declaration per key serves three readers: the validator (check())
// turning a parsed tree into a typed, defaulted one, the resolved config (defaults written out)
// and the Markdown reference (`cnn-train validate --keys`).
// Traps: variants (keys that apply to one `type` only) merge with the keys declared before
// variant() is called, so declare the common keys first; a real key's default must be a double
// (it is written as 0.0, not 0) and is checked against its own declaration when first used.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config/value.h"

namespace cnn {

// Cap of every per-dimension count a model file gives (input sizes, channels, filters, units,
// kernel, stride, padding, dilation, groups, crop, batch): 2^20. Products of such values are
// checked where they are formed; this bound keeps each factor from wrapping on its own.
constexpr int64_t kMaxDimension = int64_t(1) << 20;

class Schema;

// The type of a key's value and what it allows.
class Type {
public:
  enum class Kind { boolean, integer, uinteger, real, string, choice, int_pair, list, map, any_of };

  static Type boolean();
  static Type integer(int64_t lo = std::numeric_limits<int64_t>::min(),
                      int64_t hi = std::numeric_limits<int64_t>::max());  // inclusive bounds
  static Type uinteger();                                                  // 0 .. 2^64-1
  // A finite number in the range; open bounds exclude the bound itself.
  static Type real(double lo = -std::numeric_limits<double>::infinity(),
                   double hi = std::numeric_limits<double>::infinity(), bool lo_open = false, bool hi_open = false);
  static Type positive() { return real(0.0, std::numeric_limits<double>::infinity(), true); }
  static Type string(bool non_empty = false);
  static Type name();  // a non-empty string of letters, digits, '_' and '-'
  static Type choice(std::vector<std::string> values);
  static Type int_pair(int64_t lo, int64_t hi);  // an integer or [a, b], each in [lo, hi]
  // `noun` names one item in messages ("expected at least one layer").
  static Type list(Type item, size_t min_items = 0, size_t max_items = std::numeric_limits<size_t>::max(),
                   std::string noun = "");
  static Type map(std::shared_ptr<const Schema> schema);
  // One of several forms, picked by what was written: a map, a list or a scalar.
  static Type any_of(std::vector<Type> forms);
  // The phrase of "expected <phrase>, found ..." (a sensible one is derived otherwise).
  Type& expect(std::string phrase);

  Kind kind() const { return m_kind; }
  const std::vector<std::string>& choices() const { return m_choices; }
  const std::shared_ptr<const Schema>& schema() const { return m_schema; }
  const std::vector<Type>& forms() const { return m_forms; }
  const Type& item() const { return m_forms.front(); }  // lists
  std::string expected() const;   // "an integer in [1, 1048576]"
  std::string reference() const;  // for the key table: "integer in [1, 1048576]"

private:
  friend class Checker;
  Kind m_kind = Kind::string;
  int64_t m_lo = 0, m_hi = 0;           // integer, int_pair
  double m_rlo = 0, m_rhi = 0;          // real
  bool m_lo_open = false, m_hi_open = false;
  bool m_non_empty = false, m_name = false;
  size_t m_min_items = 0, m_max_items = 0;
  std::string m_noun;
  std::vector<std::string> m_choices;
  std::vector<Type> m_forms;  // list: the item type; any_of: the forms
  std::shared_ptr<const Schema> m_schema;
  std::string m_phrase;
};

// One key of a map.
struct Key {
  Key(std::string name, Type type, std::string meaning);
  std::string name;
  Type type;
  std::string meaning;
  bool is_required = false;
  std::optional<Value> fallback;  // the default, written into the resolved config
  std::string same_as;            // default: the value of this earlier sibling key
  std::string default_note;       // the reference's default column when the value alone says too little

  Key& required();
  Key& defaults_to(bool v);
  Key& defaults_to(int v) { return defaults_to(static_cast<int64_t>(v)); }
  Key& defaults_to(int64_t v);
  Key& defaults_to(uint64_t v);
  Key& defaults_to(double v);
  Key& defaults_to(const char* v) { return defaults_to(std::string(v)); }
  Key& defaults_to(const std::string& v);
  Key& defaults_to(const std::vector<std::string>& v);
  Key& defaults_to(const std::vector<int64_t>& v);
  Key& defaults_to(const std::vector<double>& v);
  Key& defaults_to(std::pair<int64_t, int64_t> v);  // written as n when both are equal
  Key& defaults_to_sibling(std::string sibling);
  Key& shown_default(std::string note);
};

// The keys of one map, optionally with variants picked by one of its keys (`type`).
class Schema {
public:
  // `what` names the map in messages about variants: "unknown key 'x' for optimizer type 'sgd'".
  explicit Schema(std::string what = "", std::string summary = "");

  Key& key(std::string name, Type type, std::string meaning);  // the reference is valid until the next call
  void add(Key key);
  // Keys whose presence depends on `discriminator`'s value: each variant() gets the keys declared
  // so far plus its own (a key of the same name replaces the common one in place).
  void discriminate_by(std::string discriminator, std::string known_word = "types");
  void variant(const std::string& value, std::vector<Key> keys, std::string summary = "");
  // Text printed after this map's table in the reference (layout notes and the like).
  void set_note(std::string note) { m_note = std::move(note); }

  const std::string& what() const { return m_what; }
  const std::string& summary() const { return m_summary; }
  const std::string& note() const { return m_note; }
  const std::vector<Key>& keys() const { return m_keys; }
  const std::string& discriminator() const { return m_discriminator; }
  // Variant values in declaration order, and the keys that apply for one of them.
  const std::vector<std::string>& variants() const { return m_variant_order; }
  const std::vector<Key>& keys_for(const std::string& variant) const;
  const std::string& variant_summary(const std::string& variant) const;
  const Key* find(const std::string& name) const;  // among the common keys

private:
  friend class Checker;
  std::string m_what, m_summary, m_note;
  std::vector<Key> m_keys;
  std::string m_discriminator, m_known_word;
  std::vector<std::string> m_variant_order;
  std::map<std::string, std::vector<Key>> m_variant_keys;  // merged with the common keys
  std::map<std::string, std::string> m_variant_summary;
};

// Checks a parsed tree against a type (usually Type::map(schema)) and returns the validated
// tree: scalars typed as declared, every declared key present (defaults filled in, given() false),
// locations and paths kept. A null value of a key counts as absent. ConfigError at the first
// problem: unknown key (with the closest key, or the section that has it), wrong type, out of
// range, missing required key.
Value check(const Value& raw, const Type& type);

// "a b, c" -> "a, b or c" helpers for messages.
std::string join_words(const std::vector<std::string>& words, const std::string& sep = ", ");

}  // namespace cnn
