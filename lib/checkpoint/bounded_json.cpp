// Linear-time, bounded JSON parsing (see bounded_json.h): a SAX handler that builds the value
// itself, counting depth and values as it goes, with one std::map lookup per key for the
// duplicate check. In member mode the root object is never built: each member's value is.
#include "checkpoint/bounded_json.h"

#include <algorithm>
#include <set>
#include <vector>

#include "core/error.h"

namespace cnn {

using json = nlohmann::json;

namespace {

// The member callbacks of parse_bounded_json_members.
struct MemberSink {
  const std::function<bool(const std::string&)>& wants;
  const std::function<void(const std::string&, json&&)>& take;
};

// Builds the value like nlohmann's own DOM parser; on a limit it records why and stops the parse.
// Pointers on m_open stay valid: an object's members live in a std::map, and an array only grows
// while none of its elements is open. m_level counts the containers open in the text; in member
// mode the root object is one of them but is not built (m_open holds the member value's).
class BoundedBuilder : public json::json_sax_t {
 public:
  BoundedBuilder(const JsonLimits& limits, const MemberSink* members, size_t counted_before = 0)
      : m_limits(limits), m_members(members), m_values(counted_before), m_counted_before(counted_before) {}
  json root;            // the value (whole mode) or the member value being built (member mode)
  std::string problem;  // set when the parse was stopped by a limit
  size_t values() const { return m_values; }  // counted so far, those counted before included

  // A skipped value is dropped before anything is made of it: no json, no copy of its text.
  bool null() override { return m_skipping || put(nullptr); }
  bool boolean(bool v) override { return m_skipping || put(v); }
  bool number_integer(number_integer_t v) override { return m_skipping || put(v); }
  bool number_unsigned(number_unsigned_t v) override { return m_skipping || put(v); }
  bool number_float(number_float_t v, const string_t&) override { return m_skipping || put(v); }
  bool string(string_t& v) override { return m_skipping || put(std::move(v)); }
  bool binary(binary_t& v) override { return m_skipping || put(json::binary(std::move(v))); }
  bool start_object(std::size_t) override { return open(json::value_t::object); }
  bool start_array(std::size_t) override { return open(json::value_t::array); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool key(string_t& k) override {
    if (at_members()) {
      m_skipping = !m_members->wants(k);
      if (m_skipping) return true;
      if (!m_member_keys.insert(k).second) return refuse(duplicate(k, 1));
      m_member_key = std::move(k);
      return true;
    }
    if (m_skipping) return true;
    json& object = *m_open.back();
    if (object.contains(k)) return refuse(duplicate(k, m_level));
    m_slot = &object[k];
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    return refuse(fmt::format("is not valid JSON: {}", e.what()));
  }

 private:
  bool at_members() const { return m_members && m_level == 1; }
  bool refuse(std::string why) {
    problem = std::move(why);
    return false;
  }
  static std::string duplicate(const std::string& k, int level) {
    return fmt::format("has the duplicate key '{}' (at nesting level {})", clip_text(k, 80), level);
  }
  // Every value built is counted; skipped ones allocate nothing and are not.
  bool count() {
    if (++m_values <= m_limits.max_values) return true;
    if (m_counted_before == 0) return refuse(fmt::format("holds more than {} JSON values", m_limits.max_values));
    return refuse(fmt::format("holds more than {} JSON values, what was left of the limit of {} shared with the JSON "
                              "values parsed before it",
                              m_limits.max_values - std::min(m_counted_before, m_limits.max_values),
                              m_limits.max_values));
  }
  // Where the next value goes: the root, the slot of the last key, or the end of the open array.
  json* place(json&& v) {
    if (m_open.empty()) {
      root = std::move(v);
      return &root;
    }
    json& parent = *m_open.back();
    if (parent.is_array()) {
      parent.push_back(std::move(v));
      return &parent.back();
    }
    *m_slot = std::move(v);
    return m_slot;
  }
  // A member's value is complete: hand it over.
  void hand_over() {
    m_members->take(m_member_key, std::move(root));
    root = json();
  }
  bool put(json&& v) {
    if (m_members && m_level == 0) return refuse(fmt::format("is a JSON {}, expected an object", v.type_name()));
    if (!count()) return false;
    place(std::move(v));
    if (at_members()) hand_over();
    return true;
  }
  bool open(json::value_t kind) {
    if (m_level >= m_limits.max_depth) return refuse(fmt::format("nests deeper than {} levels", m_limits.max_depth));
    if (m_members && m_level == 0) {
      if (kind != json::value_t::object) return refuse("is a JSON array, expected an object");
      m_level = 1;  // the root object: its members are handed over one by one
      return true;
    }
    ++m_level;
    if (m_skipping) return true;
    if (!count()) return false;
    m_open.push_back(place(json(kind)));
    return true;
  }
  bool close() {
    --m_level;
    if (m_skipping || (m_members && m_level == 0)) return true;
    m_open.pop_back();
    if (at_members()) hand_over();
    return true;
  }

  JsonLimits m_limits;
  const MemberSink* m_members;  // null: whole mode
  int m_level = 0;
  size_t m_values;
  size_t m_counted_before;
  bool m_skipping = false;  // inside a member value not wanted
  std::vector<json*> m_open;
  json* m_slot = nullptr;
  std::string m_member_key;
  std::set<std::string> m_member_keys;
};

void run(const std::string& text, BoundedBuilder& b, const std::string& what) {
  bool ok = false;
  try {
    ok = json::sax_parse(text, &b);
  } catch (const json::exception& e) {
    CNN_THROW("{} is not valid JSON: {}", what, e.what());
  }
  if (!ok) CNN_THROW("{} {}", what, b.problem.empty() ? "is not valid JSON" : b.problem);
}

}  // namespace

json parse_bounded_json(const std::string& text, const JsonLimits& limits, const std::string& what,
                        size_t* shared_count) {
  BoundedBuilder b(limits, nullptr, shared_count ? *shared_count : 0);
  run(text, b, what);
  if (shared_count) *shared_count = b.values();
  return std::move(b.root);
}

void parse_bounded_json_members(const std::string& text, const JsonLimits& limits, const std::string& what,
                                const std::function<bool(const std::string& key)>& wants,
                                const std::function<void(const std::string& key, json&& value)>& take) {
  MemberSink sink{wants, take};
  BoundedBuilder b(limits, &sink);
  run(text, b, what);
}

}  // namespace cnn
