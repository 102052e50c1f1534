// Value: typed reads of a validated tree, descriptions for messages, and the building calls.
// Trap: typed reads parse text() again; the validator has already proved that they succeed.
#include "config/value.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <type_traits>

namespace cnn {

// Lists of values keep their children's buffers when they grow (moved, not copied).
static_assert(std::is_nothrow_move_constructible_v<Value>);

std::string child_path(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

std::string item_path(const std::string& parent, size_t index) { return fmt::format("{}[{}]", parent, index); }

Value Value::scalar(Kind kind, std::string text, Location where, bool quoted) {
  CNN_CHECK(kind != Kind::null && kind != Kind::list && kind != Kind::map, "Value::scalar of a non-scalar kind");
  Value v;
  v.m_kind = kind;
  v.m_text = std::move(text);
  v.m_quoted = quoted;
  v.m_where = std::move(where);
  return v;
}

Value Value::list(Location where) {
  Value v;
  v.m_kind = Kind::list;
  v.m_where = std::move(where);
  return v;
}

Value Value::map(Location where) {
  Value v;
  v.m_kind = Kind::map;
  v.m_where = std::move(where);
  return v;
}

static const char* kind_name(Value::Kind k) {
  switch (k) {
    case Value::Kind::null: return "null";
    case Value::Kind::boolean: return "boolean";
    case Value::Kind::integer: return "integer";
    case Value::Kind::real: return "real";
    case Value::Kind::string: return "string";
    case Value::Kind::list: return "list";
    case Value::Kind::map: return "map";
  }
  return "?";
}

#define CNN_VALUE_EXPECT(cond, want) \
  CNN_CHECK(cond, "'{}' is a {} value, read as {} (declare it so in its schema)", m_path, kind_name(m_kind), want)

bool Value::boolean() const {
  CNN_VALUE_EXPECT(m_kind == Kind::boolean, "a boolean");
  return m_text[0] == 't' || m_text[0] == 'T';
}

// Decimal text with an optional sign ("+7" too), checked by the validator to fit T.
template <typename T>
static T parse_integer(const std::string& text, const std::string& path) {
  T v = 0;
  auto r = std::from_chars(text.data() + (text[0] == '+' ? 1 : 0), text.data() + text.size(), v);
  CNN_CHECK(r.ec == std::errc(), "'{}': '{}' does not fit its integer type", path, text);
  return v;
}

int64_t Value::integer() const {
  CNN_VALUE_EXPECT(m_kind == Kind::integer, "an integer");
  return parse_integer<int64_t>(m_text, m_path);
}

uint64_t Value::uinteger() const {
  CNN_VALUE_EXPECT(m_kind == Kind::integer && m_text[0] != '-', "an unsigned integer");
  return parse_integer<uint64_t>(m_text, m_path);
}

double Value::real() const {
  CNN_VALUE_EXPECT(m_kind == Kind::real || m_kind == Kind::integer, "a number");
  const std::string& s = m_text;
  const size_t sign = !s.empty() && (s[0] == '+' || s[0] == '-') ? 1 : 0;
  if (s.size() > sign && s[sign] == '.' && s.size() > sign + 1 && std::isalpha(static_cast<unsigned char>(s[sign + 1]))) {
    if (s.back() == 'n' || s.back() == 'N') return std::numeric_limits<double>::quiet_NaN();
    return s[0] == '-' ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  }
  double v = 0;
  auto r = std::from_chars(s.data() + (s[0] == '+' ? 1 : 0), s.data() + s.size(), v);
  CNN_CHECK(r.ec == std::errc(), "'{}': '{}' is no double", m_path, s);
  return v;
}

const std::string& Value::string() const {
  CNN_VALUE_EXPECT(m_kind == Kind::string, "a string");
  return m_text;
}

std::pair<int64_t, int64_t> Value::pair() const {
  if (m_kind == Kind::integer) return {integer(), integer()};
  CNN_VALUE_EXPECT(m_kind == Kind::list && m_items.size() == 2, "an integer or a pair");
  return {m_items[0].integer(), m_items[1].integer()};
}

std::vector<std::string> Value::strings() const {
  CNN_VALUE_EXPECT(m_kind == Kind::list, "a list of strings");
  std::vector<std::string> out;
  for (const Value& v : m_items) out.push_back(v.string());
  return out;
}

std::vector<int64_t> Value::integers() const {
  CNN_VALUE_EXPECT(m_kind == Kind::list, "a list of integers");
  std::vector<int64_t> out;
  for (const Value& v : m_items) out.push_back(v.integer());
  return out;
}

std::vector<double> Value::reals() const {
  CNN_VALUE_EXPECT(m_kind == Kind::list, "a list of numbers");
  std::vector<double> out;
  for (const Value& v : m_items) out.push_back(v.real());
  return out;
}

#undef CNN_VALUE_EXPECT

const Value* Value::find(const std::string& key) const {
  for (const auto& e : m_entries)
    if (e.first == key) return &e.second;
  return nullptr;
}

const Value& Value::operator[](const std::string& key) const {
  const Value* v = find(key);
  CNN_CHECK(v != nullptr, "'{}' has no key '{}' (read of an undeclared key?)", m_path, key);
  return *v;
}

const Value& Value::operator[](size_t i) const {
  CNN_CHECK(i < m_items.size(), "index {} out of range for '{}' of {} items", i, m_path, m_items.size());
  return m_items[i];
}

static std::string shorten(const std::string& s) { return s.size() <= 60 ? s : s.substr(0, 57) + "..."; }

std::string Value::describe() const {
  switch (m_kind) {
    case Kind::null: return "nothing";
    case Kind::map: return m_entries.empty() ? "an empty map" : "a map";
    case Kind::list: return m_items.empty() ? "an empty list" : "a list";
    case Kind::integer:
    case Kind::real: return "the number " + shorten(m_text);
    case Kind::boolean: return "the boolean " + m_text;
    case Kind::string: break;
  }
  return m_text.empty() ? "an empty string" : "the string '" + shorten(m_text) + "'";
}

void Value::fail(const std::string& message) const { throw ConfigError(m_where, m_path, message); }

void Value::fail_expected(const std::string& what) const { fail(fmt::format("expected {}, found {}", what, describe())); }

Value& Value::set(const std::string& key, Value v) {
  if (m_kind == Kind::null) m_kind = Kind::map;
  CNN_CHECK(m_kind == Kind::map, "Value::set('{}') on {} '{}'", key, describe(), m_path);
  v.set_path_recursive(child_path(m_path, key));
  for (auto& e : m_entries) {
    if (e.first != key) continue;
    Location key_where = e.second.key_where();
    e.second = std::move(v);
    e.second.m_key_where = key_where;
    return e.second;
  }
  if (v.m_key_where.line == 0 && v.m_key_where.file.empty()) v.m_key_where = v.m_where;
  m_entries.emplace_back(key, std::move(v));
  return m_entries.back().second;
}

Value& Value::push_back(Value v) {
  if (m_kind == Kind::null) m_kind = Kind::list;
  CNN_CHECK(m_kind == Kind::list, "Value::push_back on {} '{}'", describe(), m_path);
  v.set_path_recursive(item_path(m_path, m_items.size()));
  m_items.push_back(std::move(v));
  return m_items.back();
}

void Value::set_where(Location where, Location key_where) {
  m_where = std::move(where);
  m_key_where = std::move(key_where);
}

void Value::set_location_recursive(const Location& where) {
  m_where = where;
  m_key_where = where;
  for (auto& e : m_entries) e.second.set_location_recursive(where);
  for (auto& item : m_items) item.set_location_recursive(where);
}

void Value::set_path_recursive(const std::string& path) {
  m_path = path;
  for (auto& e : m_entries) e.second.set_path_recursive(child_path(path, e.first));
  for (size_t i = 0; i < m_items.size(); ++i) m_items[i].set_path_recursive(item_path(path, i));
}

}  // namespace cnn
