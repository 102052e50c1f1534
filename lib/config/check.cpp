// The checker: turns a parsed tree into a validated one against a Type (see schema.h).
// Trap: each checked value is copied from the parsed one (location, key location, path, text) and
// only its kind changes, so the resolved config keeps the spelling the user wrote.
#include <algorithm>
#include <charconv>
#include <cmath>

#include "config/schema.h"

namespace cnn {

namespace {

std::string plural(const std::string& noun) { return noun + "s"; }

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
