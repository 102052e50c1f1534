// Linear-time, depth-limited JSON parsing (see bounded_json.h): a SAX handler that builds the
// value itself, with one std::map lookup per key for the duplicate check.
#include "checkpoint/bounded_json.h"

#include <vector>

#include "core/error.h"

namespace cnn {

using json = nlohmann::json;

namespace {

std::string clip(const std::string& s, size_t max_chars = 80) {
  return s.size() <= max_chars ? s : s.substr(0, max_chars) + "...";
}

// Builds the value like nlohmann's own DOM parser; on a limit it records why and stops the parse.
// Pointers on m_open stay valid: an object's members live in a std::map, and an array only grows
// while none of its elements is open.
class BoundedBuilder : public json::json_sax_t {
 public:
  explicit BoundedBuilder(int max_depth) : m_max_depth(max_depth) {}
  json root;
  std::string problem;  // set when the parse was stopped by a limit

  bool null() override { return put(nullptr); }
  bool boolean(bool v) override { return put(v); }
  bool number_integer(number_integer_t v) override { return put(v); }
  bool number_unsigned(number_unsigned_t v) override { return put(v); }
  bool number_float(number_float_t v, const string_t&) override { return put(v); }
  bool string(string_t& v) override { return put(std::move(v)); }
  bool binary(binary_t& v) override { return put(json::binary(std::move(v))); }
  bool start_object(std::size_t) override { return open(json::object()); }
  bool start_array(std::size_t) override { return open(json::array()); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool key(string_t& k) override {
    json& object = *m_open.back();
    if (object.contains(k)) {
      problem = fmt::format("has the duplicate key '{}' (at nesting level {})", clip(k), m_open.size());
      return false;
    }
    m_slot = &object[k];
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    problem = fmt::format("is not valid JSON: {}", e.what());
    return false;
  }

 private:
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
  bool put(json&& v) {
    place(std::move(v));
    return true;
  }
  bool open(json&& v) {
    if (int(m_open.size()) >= m_max_depth) {
      problem = fmt::format("nests deeper than {} levels", m_max_depth);
      return false;
    }
    m_open.push_back(place(std::move(v)));
    return true;
  }
  bool close() {
    m_open.pop_back();
    return true;
  }

  int m_max_depth;
  std::vector<json*> m_open;
  json* m_slot = nullptr;
};

}  // namespace

json parse_bounded_json(const std::string& text, int max_depth, const std::string& what) {
  BoundedBuilder b(max_depth);
  bool ok = false;
  try {
    ok = json::sax_parse(text, &b);
  } catch (const json::exception& e) {
    CNN_THROW("{} is not valid JSON: {}", what, e.what());
  }
  if (!ok) CNN_THROW("{} {}", what, b.problem.empty() ? "is not valid JSON" : b.problem);
  return std::move(b.root);
}

}  // namespace cnn
