// Type phrases, key defaults, schemas with variants, and the checker that turns a parsed tree into
// a validated one (see schema.h).
// Trap: the checker copies each checked value from the parsed one (location, key location, path,
// text) and only changes its kind, so the resolved config keeps the spelling the user wrote.
#include "config/schema.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>

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

// ---- the checker

namespace {

const Key* find_in(const std::vector<Key>& keys, const std::string& name) {
  for (const Key& k : keys)
    if (k.name == name) return &k;
  return nullptr;
}

// A value of `kind` that keeps everything else of `raw`.
Value retyped(const Value& raw, Value::Kind kind) {
  Value v = raw;
  v.set_kind(kind);
  return v;
}

// An empty map or list that keeps `raw`'s location, key location, path and given flag.
Value shell(const Value& raw, bool map) {
  Value v = map ? Value::map(raw.where()) : Value::list(raw.where());
  v.set_where(raw.where(), raw.key_where());
  v.set_path_recursive(raw.path());
  v.set_given(raw.given());
  return v;
}

bool claims(const Type& t, const Value& raw) {
  using K = Value::Kind;
  switch (t.kind()) {
    case Type::Kind::map: return raw.is_map();
    case Type::Kind::list: return raw.is_list();
    case Type::Kind::int_pair: return raw.is_list() || (raw.kind() == K::integer && !raw.quoted());
    case Type::Kind::boolean: return raw.kind() == K::boolean;
    case Type::Kind::integer:
    case Type::Kind::uinteger: return raw.kind() == K::integer;
    case Type::Kind::real: return raw.kind() == K::integer || raw.kind() == K::real;
    case Type::Kind::string:
    case Type::Kind::choice: return raw.is_scalar();
    case Type::Kind::any_of:
      for (const Type& f : t.forms())
        if (claims(f, raw)) return true;
      return false;
  }
  return false;
}

}  // namespace

class Checker {
public:
  static Value value(const Value& raw, const Type& t) {
    using K = Value::Kind;
    switch (t.m_kind) {
      case Type::Kind::boolean:
        if (raw.kind() != K::boolean) raw.fail_expected(t.expected());
        return raw;
      case Type::Kind::integer: {
        int64_t v = 0;
        if (!parse_int(raw, v) || v < t.m_lo || v > t.m_hi) raw.fail_expected(t.expected());
        return raw;
      }
      case Type::Kind::uinteger: {
        uint64_t v = 0;
        const std::string& s = raw.text();
        const char* first = s.data() + (!s.empty() && s[0] == '+' ? 1 : 0);
        if (raw.kind() != K::integer || s[0] == '-' ||
            std::from_chars(first, s.data() + s.size(), v).ec != std::errc())
          raw.fail_expected(t.expected());
        return raw;
      }
      case Type::Kind::real: {
        double v = 0;
        if (raw.kind() != K::integer && raw.kind() != K::real) raw.fail_expected(t.expected());
        if (!parse_real(raw.text(), v)) raw.fail_expected("a number within the range of a double");
        const bool ok = std::isfinite(v) && (t.m_lo_open ? v > t.m_rlo : v >= t.m_rlo) &&
                        (t.m_hi_open ? v < t.m_rhi : v <= t.m_rhi);
        if (!ok) raw.fail_expected(t.expected());
        return retyped(raw, K::real);
      }
      case Type::Kind::string: {
        if (!raw.is_scalar()) raw.fail_expected(t.expected());
        const std::string& s = raw.text();
        bool ok = !(t.m_non_empty && s.empty());
        if (t.m_name)
          ok = ok && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isalnum(c) || c == '_' || c == '-'; });
        if (!ok) retyped(raw, K::string).fail_expected(t.expected());
        return retyped(raw, K::string);
      }
      case Type::Kind::choice: return choice(raw, t, t.expected());
      case Type::Kind::int_pair: return int_pair(raw, t);
      case Type::Kind::list: return list(raw, t);
      case Type::Kind::map: return map(raw, *t.m_schema, t);
      case Type::Kind::any_of: {
        for (const Type& f : t.m_forms) {
          if (!claims(f, raw)) continue;
          // A misspelt word should list every accepted form, not only the words.
          if (f.m_kind == Type::Kind::choice) return choice(raw, f, t.expected());
          try {
            return value(raw, f);
          } catch (const ConfigError& e) {
            if (e.key_path() != raw.path() || e.where().line != raw.where().line || e.where().col != raw.where().col)
              throw;  // a problem inside (a list item, a map key) keeps its own message
            raw.fail_expected(t.expected());
          }
        }
        raw.fail_expected(t.expected());
      }
    }
    CNN_THROW("unhandled type kind");
  }

private:
  static bool parse_int(const Value& raw, int64_t& v) {
    if (raw.kind() != Value::Kind::integer) return false;
    const std::string& s = raw.text();
    const char* first = s.data() + (s[0] == '+' ? 1 : 0);
    return std::from_chars(first, s.data() + s.size(), v).ec == std::errc();
  }

  static bool parse_real(const std::string& s, double& v) {
    const size_t sign = !s.empty() && (s[0] == '+' || s[0] == '-') ? 1 : 0;
    if (s.size() > sign + 1 && s[sign] == '.' && std::isalpha(static_cast<unsigned char>(s[sign + 1]))) {
      v = (s.back() == 'n' || s.back() == 'N') ? std::nan("") : (s[0] == '-' ? -INFINITY : INFINITY);
      return true;
    }
    auto r = std::from_chars(s.data() + (s[0] == '+' ? 1 : 0), s.data() + s.size(), v);
    return r.ec == std::errc() && r.ptr == s.data() + s.size();
  }

  static Value choice(const Value& raw, const Type& t, const std::string& phrase) {
    if (!raw.is_scalar()) raw.fail_expected(phrase);
    const std::string& s = raw.text();
    if (std::find(t.m_choices.begin(), t.m_choices.end(), s) == t.m_choices.end()) {
      std::string shown = s.size() <= 60 ? s : s.substr(0, 57) + "...";
      raw.fail(fmt::format("expected {}, found '{}'{}", phrase, shown, did_you_mean(s, t.m_choices)));
    }
    return retyped(raw, Value::Kind::string);
  }

  static Value int_pair(const Value& raw, const Type& t) {
    const Type one = Type::integer(t.m_lo, t.m_hi);
    if (raw.kind() == Value::Kind::integer && !raw.quoted()) {
      int64_t v = 0;
      if (!parse_int(raw, v) || v < t.m_lo || v > t.m_hi) raw.fail_expected(t.expected());
      return raw;
    }
    if (!raw.is_list() || raw.size() != 2) raw.fail_expected(t.expected());
    Value out = shell(raw, false);
    for (const Value& item : raw.items()) out.push_back(value(item, one));
    return out;
  }

  static Value list(const Value& raw, const Type& t) {
    if (!raw.is_list()) raw.fail_expected(t.expected());
    const size_t n = raw.size();
    if (n < t.m_min_items) {
      if (t.m_min_items == 1) raw.fail(fmt::format("expected at least one {}, found an empty list", t.m_noun));
      raw.fail(fmt::format("expected at least {} {}, found {}", t.m_min_items, plural(t.m_noun), n));
    }
    if (n > t.m_max_items) raw.fail(fmt::format("expected at most {} {}, found {}", t.m_max_items, plural(t.m_noun), n));
    Value out = shell(raw, false);
    for (const Value& item : raw.items()) out.push_back(value(item, t.item()));
    return out;
  }

  // (A null section, "train:" with nothing after it, never gets here: it counts as absent.)
  static Value map(const Value& raw_in, const Schema& s, const Type& t) {
    const Value* raw = &raw_in;
    if (!raw->is_map()) raw->fail_expected(t.expected());
    std::string variant;
    const std::vector<Key>* keys = &s.m_keys;
    if (!s.m_discriminator.empty()) {
      variant = discriminator_value(*raw, s);
      keys = &s.keys_for(variant);
    }
    for (const auto& [k, v] : raw->entries())
      if (find_in(*keys, k) == nullptr) unknown_key(*raw, s, *keys, variant, k, v);

    Value out = shell(*raw, true);
    for (const auto& [k, v] : raw->entries()) {
      const Key& key = *find_in(*keys, k);
      if (v.is_null() && !key.is_required) {
        if (std::optional<Value> d = absent(key, out, v.where())) out.set(k, std::move(*d));
        continue;
      }
      Value& placed = out.set(k, value(v, key.type));
      placed.set_where(placed.where(), v.key_where());
    }
    for (const Key& key : *keys) {
      if (raw->find(key.name) != nullptr) continue;
      if (key.is_required) raw->fail(fmt::format("missing required key '{}'", key.name));
      if (std::optional<Value> d = absent(key, out, raw->where())) out.set(key.name, std::move(*d));
    }
    return out;
  }

  // The discriminator's value, checked; an unknown variant names the known ones.
  static std::string discriminator_value(const Value& raw, const Schema& s) {
    const Key& dk = *s.find(s.m_discriminator);
    const Value* given = raw.find(dk.name);
    std::string variant;
    if (given != nullptr && !given->is_null()) variant = value(*given, dk.type).text();
    else if (dk.is_required) raw.fail(fmt::format("missing required key '{}'", dk.name));
    else variant = dk.fallback ? dk.fallback->text() : "";
    if (!s.m_variant_keys.count(variant)) {
      std::vector<std::string> known(s.m_variant_order);
      std::sort(known.begin(), known.end());
      const Value& at = given ? *given : raw;
      at.fail(fmt::format("unknown {} type '{}'{} (known {}: {})", s.m_what, variant, did_you_mean(variant, known),
                          s.m_known_word, join_words(known)));
    }
    return variant;
  }

  // The value an absent key takes: its default, its sibling's value, or (a map) its own defaults.
  static std::optional<Value> absent(const Key& key, const Value& out, const Location& where) {
    if (key.fallback) {
      CNN_CHECK(!(key.type.kind() == Type::Kind::real && key.fallback->kind() == Value::Kind::integer),
                "the default of '{}' is declared as an integer but the key is a number", key.name);
      Value d = *key.fallback;
      d.set_location_recursive(where);
      d.set_path_recursive(child_path(out.path(), key.name));
      d.set_given(false);
      try {
        return value(d, key.type);
      } catch (const ConfigError& e) {
        CNN_THROW("the default of '{}' does not satisfy its own declaration: {}", d.path(), e.message());
      }
    }
    if (!key.same_as.empty()) {
      Value d = out[key.same_as];
      if (d.is_list() && d.size() == 2 && d[0].text() == d[1].text()) d = d[0];  // [2, 2] -> 2
      d.set_location_recursive(where);
      d.set_given(false);
      return d;
    }
    if (key.type.kind() == Type::Kind::map) {
      Value d = Value::map(where);
      d.set_where(where, where);
      d.set_path_recursive(child_path(out.path(), key.name));
      d.set_given(false);
      return value(d, key.type);
    }
    return std::nullopt;
  }

  // Every key reachable through nested maps, as a path relative to `keys`' map.
  static void nested_keys(const std::vector<Key>& keys, const std::string& prefix, int depth,
                          std::vector<std::string>& out) {
    if (depth > 3) return;
    for (const Key& k : keys) {
      if (k.type.kind() != Type::Kind::map) continue;
      const Schema& sub = *k.type.schema();
      std::vector<Key> all = sub.keys();
      for (const std::string& v : sub.variants())
        for (const Key& vk : sub.keys_for(v))
          if (!find_in(all, vk.name)) all.push_back(vk);
      for (const Key& sk : all) out.push_back(child_path(child_path(prefix, k.name), sk.name));
      nested_keys(all, child_path(prefix, k.name), depth + 1, out);
    }
  }

  [[noreturn]] static void unknown_key(const Value& raw, const Schema& s, const std::vector<Key>& keys,
                                       const std::string& variant, const std::string& k, const Value& v) {
    const Location where = v.key_where();
    const std::string path = child_path(raw.path(), k);
    std::vector<std::string> names;
    for (const Key& key : keys) names.push_back(key.name);
    if (!s.m_discriminator.empty()) {
      std::vector<std::string> users;
      for (const auto& [other, other_keys] : s.m_variant_keys)
        if (other != variant && find_in(other_keys, k)) users.push_back(other);
      if (!users.empty())
        throw ConfigError(where, path,
                          fmt::format("unknown key '{}' for {} type '{}' (it applies to {}; '{}' takes {})", k, s.m_what,
                                      variant, join_words(users), variant, join_words(names)));
    }
    const std::string close = closest_match(k, names);
    if (!close.empty()) {
      if (find_in(keys, close)->is_required && raw.find(close) == nullptr)
        throw ConfigError(where, path,
                          fmt::format("missing required key '{}'; found unknown key '{}', did you mean '{}'?", close, k,
                                      close));
      throw ConfigError(where, path, fmt::format("unknown key '{}', did you mean '{}'?", k, close));
    }
    // A key written at the wrong level: "optimiser:" at the top means train.optimizer.
    std::vector<std::string> nested, last;
    nested_keys(keys, "", 0, nested);
    for (const std::string& n : nested) last.push_back(n.substr(n.rfind('.') + 1));
    const std::string deep = closest_match(k, last);
    if (!deep.empty()) {
      const std::string full = nested[std::find(last.begin(), last.end(), deep) - last.begin()];
      throw ConfigError(where, path, fmt::format("unknown key '{}', did you mean '{}'?", k, child_path(raw.path(), full)));
    }
    const std::string here = raw.path().empty() ? "the top level" : "'" + raw.path() + "'";
    throw ConfigError(where, path, fmt::format("unknown key '{}' ({} takes {})", k, here, join_words(names)));
  }
};

Value check(const Value& raw, const Type& type) { return Checker::value(raw, type); }

}  // namespace cnn
