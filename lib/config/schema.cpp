// Type phrases, key defaults and schemas with variants (see schema.h; the checker is check.cpp).
// Trap: a variant merges with the keys declared before it, so declare the common keys first.
#include "config/schema.h"

#include <algorithm>
#include <cmath>

namespace cnn {

std::string join_words(const std::vector<std::string>& words, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) out += (i ? sep : "") + words[i];
  return out;
}

namespace {

std::string num(double v) { return fmt::format("{}", v); }

std::string plural(const std::string& noun) { return noun + "s"; }

std::string item_noun(const Type& item) {
  switch (item.kind()) {
    case Type::Kind::integer:
    case Type::Kind::uinteger: return "integer";
    case Type::Kind::real: return "number";
    case Type::Kind::boolean: return "boolean";
    case Type::Kind::map: return "map";
    case Type::Kind::list: return "list";
    default: return "value";
  }
}

// "in [1, 1048576]", ">= 1", "" (unbounded).
std::string int_range(int64_t lo, int64_t hi) {
  const bool no_lo = lo == std::numeric_limits<int64_t>::min(), no_hi = hi == std::numeric_limits<int64_t>::max();
  if (no_lo && no_hi) return "";
  if (no_hi) return fmt::format(">= {}", lo);
  if (no_lo) return fmt::format("<= {}", hi);
  return fmt::format("in [{}, {}]", lo, hi);
}

std::string real_range(double lo, double hi, bool lo_open, bool hi_open) {
  const bool no_lo = std::isinf(lo), no_hi = std::isinf(hi);
  if (no_lo && no_hi) return "";
  if (no_hi) return fmt::format("{} {}", lo_open ? ">" : ">=", num(lo));
  if (no_lo) return fmt::format("{} {}", hi_open ? "<" : "<=", num(hi));
  return fmt::format("in {}{}, {}{}", lo_open ? "(" : "[", num(lo), num(hi), hi_open ? ")" : "]");
}

std::string with_range(const std::string& what, const std::string& range) {
  return range.empty() ? what : what + " " + range;
}

std::string or_join(const std::vector<std::string>& words) {
  if (words.size() <= 1) return join_words(words);
  std::vector<std::string> head(words.begin(), words.end() - 1);
  return join_words(head) + " or " + words.back();
}

std::string format_real(double v) {
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

}  // namespace

// ---- Type

Type Type::boolean() {
  Type t;
  t.m_kind = Kind::boolean;
  return t;
}

Type Type::integer(int64_t lo, int64_t hi) {
  Type t;
  t.m_kind = Kind::integer;
  t.m_lo = lo;
  t.m_hi = hi;
  return t;
}

Type Type::uinteger() {
  Type t;
  t.m_kind = Kind::uinteger;
  return t;
}

Type Type::real(double lo, double hi, bool lo_open, bool hi_open) {
  Type t;
  t.m_kind = Kind::real;
  t.m_rlo = lo;
  t.m_rhi = hi;
  t.m_lo_open = lo_open;
  t.m_hi_open = hi_open;
  return t;
}

Type Type::string(bool non_empty) {
  Type t;
  t.m_kind = Kind::string;
  t.m_non_empty = non_empty;
  return t;
}

Type Type::name() {
  Type t = string(true);
  t.m_name = true;
  return t;
}

Type Type::choice(std::vector<std::string> values) {
  Type t;
  t.m_kind = Kind::choice;
  t.m_choices = std::move(values);
  return t;
}

Type Type::int_pair(int64_t lo, int64_t hi) {
  Type t = integer(lo, hi);
  t.m_kind = Kind::int_pair;
  return t;
}

Type Type::list(Type item, size_t min_items, size_t max_items, std::string noun) {
  Type t;
  t.m_kind = Kind::list;
  t.m_noun = noun.empty() ? item_noun(item) : std::move(noun);
  t.m_forms = {std::move(item)};
  t.m_min_items = min_items;
  t.m_max_items = max_items;
  return t;
}

Type Type::map(std::shared_ptr<const Schema> schema) {
  Type t;
  t.m_kind = Kind::map;
  t.m_schema = std::move(schema);
  return t;
}

Type Type::any_of(std::vector<Type> forms) {
  Type t;
  t.m_kind = Kind::any_of;
  t.m_forms = std::move(forms);
  return t;
}

Type& Type::expect(std::string phrase) {
  m_phrase = std::move(phrase);
  return *this;
}

std::string Type::expected() const {
  if (!m_phrase.empty()) return m_phrase;
  switch (m_kind) {
    case Kind::boolean: return "true or false";
    case Kind::integer: return with_range("an integer", int_range(m_lo, m_hi));
    case Kind::uinteger: return "a non-negative integer";
    case Kind::real: {
      if (m_rlo == 0 && m_lo_open && std::isinf(m_rhi)) return "a positive number";
      return with_range("a number", real_range(m_rlo, m_rhi, m_lo_open, m_hi_open));
    }
    case Kind::string:
      return m_name ? "a name of letters, digits, '_' and '-'" : m_non_empty ? "a non-empty string" : "a string";
    case Kind::choice: return "one of " + join_words(m_choices);
    case Kind::int_pair: return with_range("an integer", int_range(m_lo, m_hi)) + " or a pair [h, w] of them";
    case Kind::list: return "a list of " + plural(m_noun);
    case Kind::map: return "a map";
    case Kind::any_of: {
      std::vector<std::string> phrases;
      for (const Type& f : m_forms) phrases.push_back(f.expected());
      return or_join(phrases);
    }
  }
  return "?";
}

std::string Type::reference() const {
  switch (m_kind) {
    case Kind::boolean: return "bool";
    case Kind::integer: return with_range("integer", int_range(m_lo, m_hi));
    case Kind::uinteger: return "integer in [0, 2^64)";
    case Kind::real: return with_range("number", real_range(m_rlo, m_rhi, m_lo_open, m_hi_open));
    case Kind::string: return m_name ? "name (letters, digits, `_`, `-`)" : "string";
    case Kind::choice: {
      std::vector<std::string> quoted;
      for (const auto& c : m_choices) quoted.push_back("`" + c + "`");
      return join_words(quoted);
    }
    case Kind::int_pair: return with_range("integer or [h, w]", int_range(m_lo, m_hi));
    case Kind::list: {
      std::string counts;
      if (m_max_items != std::numeric_limits<size_t>::max())
        counts = fmt::format(" ({} to {} items)", m_min_items, m_max_items);
      else if (m_min_items > 0)
        counts = fmt::format(" (at least {})", m_min_items);
      return "list of " + item().reference() + counts;
    }
    case Kind::map: return "map";
    case Kind::any_of: {
      std::vector<std::string> refs;
      for (const Type& f : m_forms) refs.push_back(f.reference());
      return join_words(refs, "; or ");
    }
  }
  return "?";
}

// ---- Key

Key::Key(std::string name_, Type type_, std::string meaning_)
    : name(std::move(name_)), type(std::move(type_)), meaning(std::move(meaning_)) {}

Key& Key::required() {
  is_required = true;
  return *this;
}

Key& Key::defaults_to(bool v) {
  fallback = Value::scalar(Value::Kind::boolean, v ? "true" : "false");
  return *this;
}

Key& Key::defaults_to(int64_t v) {
  fallback = Value::scalar(Value::Kind::integer, std::to_string(v));
  return *this;
}

Key& Key::defaults_to(uint64_t v) {
  fallback = Value::scalar(Value::Kind::integer, std::to_string(v));
  return *this;
}

Key& Key::defaults_to(double v) {
  fallback = Value::scalar(Value::Kind::real, format_real(v));
  return *this;
}

Key& Key::defaults_to(const std::string& v) {
  fallback = Value::scalar(Value::Kind::string, v, {}, true);
  return *this;
}

Key& Key::defaults_to(const std::vector<std::string>& v) {
  Value list = Value::list();
  for (const auto& s : v) list.push_back(Value::scalar(Value::Kind::string, s, {}, true));
  fallback = std::move(list);
  return *this;
}

Key& Key::defaults_to(const std::vector<int64_t>& v) {
  Value list = Value::list();
  for (int64_t x : v) list.push_back(Value::scalar(Value::Kind::integer, std::to_string(x)));
  fallback = std::move(list);
  return *this;
}

Key& Key::defaults_to(const std::vector<double>& v) {
  Value list = Value::list();
  for (double x : v) list.push_back(Value::scalar(Value::Kind::real, format_real(x)));
  fallback = std::move(list);
  return *this;
}

Key& Key::defaults_to(std::pair<int64_t, int64_t> v) {
  if (v.first == v.second) return defaults_to(v.first);
  return defaults_to(std::vector<int64_t>{v.first, v.second});
}

Key& Key::defaults_to_sibling(std::string sibling) {
  same_as = std::move(sibling);
  return *this;
}

Key& Key::shown_default(std::string note) {
  default_note = std::move(note);
  return *this;
}

// ---- Schema

Schema::Schema(std::string what, std::string summary) : m_what(std::move(what)), m_summary(std::move(summary)) {}

Key& Schema::key(std::string name, Type type, std::string meaning) {
  add(Key(std::move(name), std::move(type), std::move(meaning)));
  return m_keys.back();
}

void Schema::add(Key key) {
  CNN_CHECK(find(key.name) == nullptr, "key '{}' declared twice in the {} schema", key.name, m_what);
  m_keys.push_back(std::move(key));
}

void Schema::discriminate_by(std::string discriminator, std::string known_word) {
  CNN_CHECK(find(discriminator) != nullptr, "discriminator '{}' is not a declared key", discriminator);
  m_discriminator = std::move(discriminator);
  m_known_word = std::move(known_word);
}

void Schema::variant(const std::string& value, std::vector<Key> keys, std::string summary) {
  CNN_CHECK(!m_discriminator.empty(), "variant '{}' of a schema without a discriminator", value);
  CNN_CHECK(!m_variant_keys.count(value), "variant '{}' declared twice", value);
  std::vector<Key> merged = m_keys;
  for (Key& k : keys) {
    auto same = std::find_if(merged.begin(), merged.end(), [&](const Key& m) { return m.name == k.name; });
    if (same != merged.end()) *same = std::move(k);
    else merged.push_back(std::move(k));
  }
  m_variant_order.push_back(value);
  m_variant_keys.emplace(value, std::move(merged));
  m_variant_summary.emplace(value, std::move(summary));
}

const std::vector<Key>& Schema::keys_for(const std::string& variant) const {
  auto it = m_variant_keys.find(variant);
  return it == m_variant_keys.end() ? m_keys : it->second;
}

const std::string& Schema::variant_summary(const std::string& variant) const {
  static const std::string none;
  auto it = m_variant_summary.find(variant);
  return it == m_variant_summary.end() ? none : it->second;
}

const Key* Schema::find(const std::string& name) const {
  for (const Key& k : m_keys)
    if (k.name == name) return &k;
  return nullptr;
}

}  // namespace cnn
