// ConfigNode: the YAML-free config tree, its strict scalar conversions and its key bookkeeping.
// Trap: getters with a fallback mutate the tree (they write the default in), so reading a config
// is not const; a null node read as a map behaves as an empty map and becomes one on a write.
#include "config/node.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <type_traits>

namespace cnn {

// ModelSpec keeps pointers into sequences of the tree: growing a parent's vector must move the
// children (keeping their own buffers), never copy them.
static_assert(std::is_nothrow_move_constructible_v<ConfigNode>);

namespace {

std::string child_path(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

std::string item_path(const std::string& parent, size_t i) { return fmt::format("{}[{}]", parent, i); }

std::string join(const std::vector<std::string>& words, const std::string& sep = ", ") {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) out += (i ? sep : "") + words[i];
  return out;
}

bool is_bool_text(const std::string& s) {
  return s == "true" || s == "false" || s == "True" || s == "False" || s == "TRUE" || s == "FALSE";
}

size_t skip_sign(const std::string& s) { return !s.empty() && (s[0] == '+' || s[0] == '-') ? 1 : 0; }

bool all_digits(const std::string& s, size_t from, size_t to) {
  if (from >= to) return false;
  for (size_t i = from; i < to; ++i)
    if (s[i] < '0' || s[i] > '9') return false;
  return true;
}

bool is_int_text(const std::string& s) { return all_digits(s, skip_sign(s), s.size()); }

bool is_special_float(const std::string& s) {
  std::string t = s.substr(skip_sign(s));
  return t == ".inf" || t == ".Inf" || t == ".INF" ||
         (s == t && (t == ".nan" || t == ".NaN" || t == ".NAN"));
}

// YAML 1.2 core schema float: [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
bool is_float_text(const std::string& s) {
  if (is_special_float(s)) return true;
  size_t i = skip_sign(s), digits = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i, ++digits;
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i, ++digits;
  }
  if (digits == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    size_t start = i + ((i < s.size() && (s[i] == '+' || s[i] == '-')) ? 1 : 0);
    if (!all_digits(s, start, s.size())) return false;
    i = s.size();
  }
  return i == s.size();
}

std::string shorten(const std::string& s) { return s.size() <= 60 ? s : s.substr(0, 57) + "..."; }

// Text that reads back as the same double: shortest round-trip digits, and always a float
// (".0" appended) so that the resolved config shows which keys are real numbers.
template <typename T>
std::string format_real(T v) {
  if (std::isnan(v)) return ".nan";
  if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

template <typename T>
const char* type_name() {
  if constexpr (std::is_same_v<T, std::string>) return "a string";
  else if constexpr (std::is_same_v<T, bool>) return "true or false";
  else if constexpr (std::is_same_v<T, uint64_t>) return "a non-negative integer";
  else if constexpr (std::is_integral_v<T>) return "an integer";
  else return "a number";
}

template <typename T>
ConfigNode to_node(const T& value, const Location& where) {
  if constexpr (std::is_same_v<T, std::string>) return make_quoted_scalar(value, where, "");
  else if constexpr (std::is_same_v<T, bool>) return ConfigNode::scalar(value ? "true" : "false", where);
  else if constexpr (std::is_integral_v<T>) return ConfigNode::scalar(std::to_string(value), where);
  else return ConfigNode::scalar(format_real(value), where);
}

}  // namespace

ConfigNode ConfigNode::scalar(std::string value, Location where, std::string path) {
  ConfigNode n;
  n.m_kind = NodeKind::scalar;
  n.m_value = std::move(value);
  n.m_where = std::move(where);
  n.m_path = std::move(path);
  return n;
}

ConfigNode make_quoted_scalar(std::string value, Location where, std::string path) {
  ConfigNode n = ConfigNode::scalar(std::move(value), std::move(where), std::move(path));
  n.m_quoted = true;
  return n;
}

ConfigNode ConfigNode::sequence(Location where, std::string path) {
  ConfigNode n;
  n.m_kind = NodeKind::sequence;
  n.m_where = std::move(where);
  n.m_path = std::move(path);
  return n;
}

ConfigNode ConfigNode::map(Location where, std::string path) {
  ConfigNode n;
  n.m_kind = NodeKind::map;
  n.m_where = std::move(where);
  n.m_path = std::move(path);
  return n;
}

std::string ConfigNode::describe() const {
  switch (m_kind) {
    case NodeKind::null: return "nothing";
    case NodeKind::map: return m_entries.empty() ? "an empty map" : "a map";
    case NodeKind::sequence: return m_items.empty() ? "an empty list" : "a list";
    case NodeKind::scalar: break;
  }
  if (!m_quoted && (is_int_text(m_value) || is_float_text(m_value))) return "the number " + m_value;
  if (!m_quoted && is_bool_text(m_value)) return "the boolean " + m_value;
  return "the string '" + shorten(m_value) + "'";
}

void ConfigNode::fail(const std::string& message) const { throw ConfigError(m_where, m_path, message); }

void ConfigNode::expect_map(const std::string& what) const {
  if (!is_map()) fail(fmt::format("expected {}, found {}", what, describe()));
}

void ConfigNode::expect_sequence(const std::string& what) const {
  if (!is_sequence()) fail(fmt::format("expected {}, found {}", what, describe()));
}

const std::string& ConfigNode::as_string() const {
  if (!is_scalar()) fail(fmt::format("expected a string, found {}", describe()));
  return m_value;
}

int64_t ConfigNode::as_int() const {
  if (!is_scalar() || m_quoted || !is_int_text(m_value))
    fail(fmt::format("expected an integer, found {}", describe()));
  const char* first = m_value.data() + (m_value[0] == '+' ? 1 : 0);
  int64_t v = 0;
  auto r = std::from_chars(first, m_value.data() + m_value.size(), v);
  if (r.ec != std::errc())
    fail(fmt::format("expected an integer between {} and {}, found {}",
                     std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), describe()));
  return v;
}

double ConfigNode::as_double() const {
  if (!is_scalar() || m_quoted || !(is_int_text(m_value) || is_float_text(m_value)))
    fail(fmt::format("expected a number, found {}", describe()));
  if (is_special_float(m_value)) {
    if (m_value.back() == 'n' || m_value.back() == 'N') return std::numeric_limits<double>::quiet_NaN();
    double inf = std::numeric_limits<double>::infinity();
    return m_value[0] == '-' ? -inf : inf;
  }
  const char* first = m_value.data() + (m_value[0] == '+' ? 1 : 0);
  double v = 0;
  auto r = std::from_chars(first, m_value.data() + m_value.size(), v);
  if (r.ec != std::errc() || r.ptr != m_value.data() + m_value.size())
    fail(fmt::format("expected a number within the range of a double, found {}", describe()));
  return v;
}

bool ConfigNode::as_bool() const {
  if (!is_scalar() || m_quoted || !is_bool_text(m_value))
    fail(fmt::format("expected true or false, found {}", describe()));
  return m_value[0] == 't' || m_value[0] == 'T';
}

template <typename T>
T ConfigNode::as() const {
  if constexpr (std::is_same_v<T, std::string>) {
    return as_string();
  } else if constexpr (std::is_same_v<T, bool>) {
    return as_bool();
  } else if constexpr (std::is_same_v<T, uint64_t>) {
    if (!is_scalar() || m_quoted || !is_int_text(m_value) || m_value[0] == '-')
      fail(fmt::format("expected a non-negative integer, found {}", describe()));
    const char* first = m_value.data() + (m_value[0] == '+' ? 1 : 0);
    uint64_t v = 0;
    auto r = std::from_chars(first, m_value.data() + m_value.size(), v);
    if (r.ec != std::errc())
      fail(fmt::format("expected an integer between 0 and {}, found {}",
                       std::numeric_limits<uint64_t>::max(), describe()));
    return v;
  } else if constexpr (std::is_integral_v<T>) {
    int64_t v = as_int();
    if (v < std::numeric_limits<T>::min() || v > std::numeric_limits<T>::max())
      fail(fmt::format("expected an integer between {} and {}, found {}", std::numeric_limits<T>::min(),
                       std::numeric_limits<T>::max(), describe()));
    return static_cast<T>(v);
  } else {
    static_assert(std::is_floating_point_v<T>, "ConfigNode::as<T>: unsupported type");
    double v = as_double();
    if (std::isfinite(v) && std::fabs(v) > static_cast<double>(std::numeric_limits<T>::max()))
      fail(fmt::format("expected a number within the range of a float, found {}", describe()));
    return static_cast<T>(v);
  }
}

bool ConfigNode::has(const std::string& key) {
  ConfigNode* n = find(key);
  return n != nullptr && !n->is_null();
}

ConfigNode* ConfigNode::find(const std::string& key) {
  if (!is_null()) expect_map();
  m_known.insert(key);
  for (auto& e : m_entries)
    if (e.first == key) return &e.second;
  return nullptr;
}

ConfigNode& ConfigNode::at(const std::string& key) {
  ConfigNode* n = find(key);
  if (n == nullptr) {
    // A misspelt required key shows up as "missing": point at the likely typo instead.
    for (const auto& e : m_entries) {
      if (!m_known.count(e.first) && closest_match(e.first, {key}) == key) {
        throw ConfigError(e.second.key_where(), m_path.empty() ? e.first : m_path + "." + e.first,
                          fmt::format("missing required key '{}'; found unknown key '{}', did you mean '{}'?", key,
                                      e.first, key));
      }
    }
    fail(fmt::format("missing required key '{}'", key));
  }
  return *n;
}

std::vector<std::string> ConfigNode::keys() const {
  std::vector<std::string> out;
  for (const auto& e : m_entries) out.push_back(e.first);
  return out;
}

template <typename T>
T ConfigNode::get(const std::string& key) {
  return at(key).as<T>();
}

template <typename T>
T ConfigNode::get(const std::string& key, const T& fallback) {
  ConfigNode* n = find(key);
  if (n == nullptr || n->is_null()) n = &set(key, to_node(fallback, n ? n->m_where : m_where));
  return n->as<T>();
}

template <typename T>
static std::vector<T> read_list(const ConfigNode& list) {
  list.expect_sequence(fmt::format("a list of {}", type_name<T>()));
  std::vector<T> out;
  for (size_t i = 0; i < list.size(); ++i) out.push_back(list[i].as<T>());
  return out;
}

template <typename T>
std::vector<T> ConfigNode::get_list(const std::string& key) {
  return read_list<T>(at(key));
}

template <typename T>
std::vector<T> ConfigNode::get_list(const std::string& key, const std::vector<T>& fallback) {
  ConfigNode* n = find(key);
  if (n == nullptr || n->is_null()) {
    ConfigNode list = sequence(n ? n->m_where : m_where);
    for (const T& v : fallback) list.push_back(to_node(v, list.m_where));
    n = &set(key, std::move(list));
  }
  return read_list<T>(*n);
}

std::pair<int64_t, int64_t> ConfigNode::get_pair(const std::string& key, std::pair<int64_t, int64_t> fallback) {
  ConfigNode* n = find(key);
  if (n == nullptr || n->is_null()) {
    Location where = n ? n->m_where : m_where;
    if (fallback.first == fallback.second) {
      n = &set(key, to_node(fallback.first, where));
    } else {
      ConfigNode pair = sequence(where);
      pair.push_back(to_node(fallback.first, where));
      pair.push_back(to_node(fallback.second, where));
      n = &set(key, std::move(pair));
    }
  }
  if (n->is_scalar() && !n->m_quoted && is_int_text(n->m_value)) {
    int64_t v = n->as_int();
    return {v, v};
  }
  if (n->is_sequence() && n->size() == 2) return {(*n)[0].as_int(), (*n)[1].as_int()};
  n->fail(fmt::format("expected an integer or a pair [a, b], found {}", n->describe()));
}

static std::string check_choice(const ConfigNode& n, const std::vector<std::string>& choices) {
  std::string listed = join(choices);
  if (!n.is_scalar()) n.fail(fmt::format("expected one of {}, found {}", listed, n.describe()));
  const std::string& v = n.as_string();
  if (std::find(choices.begin(), choices.end(), v) == choices.end())
    n.fail(fmt::format("expected one of {}, found '{}'{}", listed, shorten(v), did_you_mean(v, choices)));
  return v;
}

std::string ConfigNode::get_choice(const std::string& key, const std::vector<std::string>& choices) {
  return check_choice(at(key), choices);
}

std::string ConfigNode::get_choice(const std::string& key, const std::vector<std::string>& choices,
                                   const std::string& fallback) {
  ConfigNode* n = find(key);
  if (n == nullptr || n->is_null()) n = &set(key, to_node(fallback, n ? n->m_where : m_where));
  return check_choice(*n, choices);
}

ConfigNode& ConfigNode::set(const std::string& key, ConfigNode value) {
  if (is_null()) m_kind = NodeKind::map;
  expect_map();
  value.set_path_recursive(child_path(m_path, key));
  for (auto& e : m_entries) {
    if (e.first != key) continue;
    Location key_where = e.second.key_where();
    e.second = std::move(value);
    e.second.m_key_where = key_where;
    return e.second;
  }
  if (value.m_key_where.line == 0 && value.m_key_where.file.empty()) value.m_key_where = value.m_where;
  m_entries.emplace_back(key, std::move(value));
  return m_entries.back().second;
}

void ConfigNode::erase(const std::string& key) {
  m_entries.erase(std::remove_if(m_entries.begin(), m_entries.end(),
                                 [&](const auto& e) { return e.first == key; }),
                  m_entries.end());
}

size_t ConfigNode::size() const { return is_map() ? m_entries.size() : m_items.size(); }

ConfigNode& ConfigNode::operator[](size_t i) {
  expect_sequence();
  CNN_CHECK(i < m_items.size(), "index {} out of range for '{}' of {} items", i, m_path, m_items.size());
  return m_items[i];
}

const ConfigNode& ConfigNode::operator[](size_t i) const {
  expect_sequence();
  CNN_CHECK(i < m_items.size(), "index {} out of range for '{}' of {} items", i, m_path, m_items.size());
  return m_items[i];
}

ConfigNode& ConfigNode::push_back(ConfigNode value) {
  if (is_null()) m_kind = NodeKind::sequence;
  expect_sequence();
  value.set_path_recursive(item_path(m_path, m_items.size()));
  m_items.push_back(std::move(value));
  return m_items.back();
}

void ConfigNode::mark_known(const std::vector<std::string>& keys) { m_known.insert(keys.begin(), keys.end()); }

void ConfigNode::check_unknown_keys(bool recurse) const {
  if (is_sequence() && recurse) {
    for (const auto& item : m_items) item.check_unknown_keys(true);
    return;
  }
  if (!is_map()) return;
  std::vector<std::string> known(m_known.begin(), m_known.end());
  for (const auto& [key, value] : m_entries) {
    if (m_known.count(key)) continue;
    std::string hint = did_you_mean(key, known);
    if (hint.empty() && !known.empty()) hint = fmt::format(" (known keys here: {})", join(known));
    throw ConfigError(value.key_where(), child_path(m_path, key), fmt::format("unknown key '{}'{}", key, hint));
  }
  if (recurse)
    for (const auto& e : m_entries) e.second.check_unknown_keys(true);
}

ConfigNode ConfigNode::clone() const {
  ConfigNode copy = *this;
  copy.m_known.clear();
  for (auto& e : copy.m_entries) e.second = e.second.clone();
  for (auto& item : copy.m_items) item = item.clone();
  return copy;
}

void ConfigNode::set_path_recursive(const std::string& path) {
  m_path = path;
  for (auto& e : m_entries) e.second.set_path_recursive(child_path(path, e.first));
  for (size_t i = 0; i < m_items.size(); ++i) m_items[i].set_path_recursive(item_path(path, i));
}

void ConfigNode::set_location_recursive(const Location& where) {
  m_where = where;
  m_key_where = where;
  for (auto& e : m_entries) e.second.set_location_recursive(where);
  for (auto& item : m_items) item.set_location_recursive(where);
}

#define CNN_CONFIG_INSTANTIATE(T)                                                        \
  template T ConfigNode::as<T>() const;                                                  \
  template T ConfigNode::get<T>(const std::string&);                                     \
  template T ConfigNode::get<T>(const std::string&, const T&);                           \
  template std::vector<T> ConfigNode::get_list<T>(const std::string&);                   \
  template std::vector<T> ConfigNode::get_list<T>(const std::string&, const std::vector<T>&);
CNN_CONFIG_INSTANTIATE(std::string)
CNN_CONFIG_INSTANTIATE(int64_t)
CNN_CONFIG_INSTANTIATE(int)
CNN_CONFIG_INSTANTIATE(uint64_t)
CNN_CONFIG_INSTANTIATE(double)
CNN_CONFIG_INSTANTIATE(float)
CNN_CONFIG_INSTANTIATE(bool)
#undef CNN_CONFIG_INSTANTIATE

}  // namespace cnn
