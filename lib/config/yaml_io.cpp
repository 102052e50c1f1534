// The only yaml-cpp user: YAML text -> ConfigNode (with 1-based file:line:col), and ConfigNode ->
// block-style YAML text. Traps: yaml-cpp marks are 0-based and null values may carry no mark (or
// the next token's), so a null value is located at its key; yaml-cpp keeps duplicate map keys,
// so the reader rejects them itself; plain "3" and quoted "3" differ only by yaml-cpp's tag.
#include "config/node.h"

#include <yaml-cpp/yaml.h>

#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

namespace cnn {

namespace {

constexpr int kMaxDepth = 100;  // also stops recursive aliases (&a [*a])

std::string child_path(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

}  // namespace

class YamlReader {
public:
  explicit YamlReader(std::string file) : m_file(std::move(file)) {}

  ConfigNode read(const std::string& text) {
    std::vector<YAML::Node> docs;
    try {
      docs = YAML::LoadAll(text);
    } catch (const YAML::Exception& e) {
      throw ConfigError(at(e.mark, Location{m_file, 0, 0}), "", "YAML syntax error: " + e.msg);
    }
    Location start{m_file, 1, 1};
    if (docs.empty()) return with_location(ConfigNode(), start);
    if (docs.size() > 1)
      throw ConfigError(at(docs[1].Mark(), start), "",
                        "expected one YAML document, found a second one starting here");
    return convert(docs[0], "", start, 0);
  }

private:
  Location at(const YAML::Mark& mark, const Location& fallback) const {
    if (mark.is_null() || mark.line < 0) return fallback;
    return Location{m_file, mark.line + 1, mark.column + 1};
  }

  static ConfigNode with_location(ConfigNode n, const Location& where) {
    n.m_where = where;
    return n;
  }

  ConfigNode convert(const YAML::Node& y, const std::string& path, const Location& fallback, int depth) {
    Location where = at(y.Mark(), fallback);
    if (depth > kMaxDepth)
      throw ConfigError(where, "", fmt::format("nested deeper than {} levels (a recursive alias?)", kMaxDepth));
    switch (y.Type()) {
      case YAML::NodeType::Scalar: {
        ConfigNode n = ConfigNode::scalar(y.Scalar(), where, path);
        // yaml-cpp tags quoted scalars "!" and plain ones "?"; an explicit !!str is a string too.
        n.m_quoted = y.Tag() == "!" || y.Tag() == "tag:yaml.org,2002:str";
        return n;
      }
      case YAML::NodeType::Sequence: {
        ConfigNode n = ConfigNode::sequence(where, path);
        for (size_t i = 0; i < y.size(); ++i)
          n.m_items.push_back(convert(y[i], fmt::format("{}[{}]", path, i), where, depth + 1));
        return n;
      }
      case YAML::NodeType::Map: return convert_map(y, path, where, depth);
      case YAML::NodeType::Null:
      case YAML::NodeType::Undefined: break;
    }
    ConfigNode n;
    n.m_where = where;
    n.m_path = path;
    return n;
  }

  ConfigNode convert_map(const YAML::Node& y, const std::string& path, const Location& where, int depth) {
    ConfigNode n = ConfigNode::map(where, path);
    std::unordered_map<std::string, Location> seen;
    for (auto it = y.begin(); it != y.end(); ++it) {
      Location key_where = at(it->first.Mark(), where);
      if (!it->first.IsScalar())
        throw ConfigError(key_where, path,
                          fmt::format("expected a map key (a name), found a {}",
                                      it->first.IsNull() ? "missing key" : it->first.IsMap() ? "map" : "list"));
      std::string key = it->first.Scalar();
      std::string key_path = child_path(path, key);
      auto [first, fresh] = seen.emplace(key, key_where);
      if (!fresh)
        throw ConfigError(key_where, key_path,
                          fmt::format("duplicate key '{}' (first written at line {}, column {})", key,
                                      first->second.line, first->second.col));
      ConfigNode value = convert(it->second, key_path, key_where, depth + 1);
      if (value.is_null()) value.m_where = key_where;  // "key:" has no value to point at
      value.m_key_where = key_where;
      n.m_entries.emplace_back(key, std::move(value));
    }
    return n;
  }

  std::string m_file;
};

ConfigNode parse_yaml(const std::string& text, const std::string& file_name) {
  return YamlReader(file_name).read(text);
}

ConfigNode load_yaml_file(const std::string& path) {
  namespace fs = std::filesystem;
  Location where{path, 0, 0};
  std::error_code ec;
  if (!fs::exists(path, ec)) throw ConfigError(where, "", fmt::format("cannot read '{}': no such file", path));
  if (fs::is_directory(path, ec))
    throw ConfigError(where, "", fmt::format("cannot read '{}': it is a directory, expected a YAML file", path));
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in || in.bad()) throw ConfigError(where, "", fmt::format("cannot read '{}'", path));
  return parse_yaml(text.str(), path);
}

// ---- writer

namespace {

bool is_word(const std::string& s, std::initializer_list<const char*> words) {
  for (const char* w : words)
    if (s == w) return true;
  return false;
}

// Plain (unquoted) text that every YAML reader, in block and flow context, reads back as this
// same string: a conservative character set, and none of YAML 1.1's null/bool words.
bool plain_safe(const std::string& s) {
  if (s.empty() || s.back() == ' ') return false;
  if (is_word(s, {"~", "null", "Null", "NULL", "y", "Y", "n", "N", "yes", "Yes", "YES", "no", "No", "NO",
                  "on", "On", "ON", "off", "Off", "OFF"}))
    return false;
  auto alnum = [](unsigned char c) { return std::isalnum(c) || c >= 0x80; };
  unsigned char c0 = s[0];
  bool start_ok = alnum(c0) || c0 == '_' || c0 == '/' || c0 == '.' ||
                  ((c0 == '-' || c0 == '+') && s.size() > 1 && (alnum(s[1]) || s[1] == '.'));
  if (!start_ok) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    unsigned char c = s[i];
    if (alnum(c) || std::strchr("_-./+()=~^$@", c) != nullptr) continue;
    if (c == ' ' && s[i - 1] != ' ') continue;
    return false;
  }
  return true;
}

// Text that a reader would take for something other than a string when written plain.
bool looks_typed(const std::string& s) {
  unsigned char c0 = s.empty() ? 0 : s[0];
  return std::isdigit(c0) || c0 == '-' || c0 == '+' || c0 == '.' ||
         is_word(s, {"true", "false", "True", "False", "TRUE", "FALSE"});
}

std::string double_quoted(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
        else out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string key_text(const std::string& key) { return plain_safe(key) ? key : double_quoted(key); }

std::string scalar_text(const ConfigNode& n) {
  const std::string& v = n.as_string();
  if (!plain_safe(v) || (n.quoted() && looks_typed(v))) return double_quoted(v);
  return v;
}

constexpr size_t kFlowWidth = 72;

// The one-line form of a node, or "" when it should be written as a block.
std::string inline_text(const ConfigNode& n, size_t indent) {
  if (n.is_null()) return "null";
  if (n.is_scalar()) return scalar_text(n);
  if (n.size() == 0) return n.is_map() ? "{}" : "[]";
  if (n.is_map()) return "";
  std::string out = "[";
  for (size_t i = 0; i < n.size(); ++i) {
    if (!n[i].is_scalar() && !n[i].is_null()) return "";
    out += (i ? ", " : "") + inline_text(n[i], 0);
    if (out.size() + indent > kFlowWidth) return "";
  }
  return out + "]";
}

void write_block(const ConfigNode& n, size_t indent, std::string& out);

// Writes the value after "key:" or "-": on the same line when it fits, else as an indented block.
void write_value(const ConfigNode& v, size_t indent, bool after_dash, std::string& out) {
  std::string line = inline_text(v, indent);
  if (!line.empty()) {
    out += " " + line + "\n";
    return;
  }
  if (after_dash) {
    // "- a: 1\n  b: 2": the block's first line continues the dash line.
    std::string block;
    write_block(v, indent + 2, block);
    out += " " + block.substr(indent + 2);
    return;
  }
  out += "\n";
  write_block(v, indent + 2, out);
}

void write_block(const ConfigNode& n, size_t indent, std::string& out) {
  std::string pad(indent, ' ');
  if (n.is_map()) {
    for (const auto& [key, value] : n.entries()) {
      out += pad + key_text(key) + ":";
      write_value(value, indent, false, out);
    }
  } else {
    for (const auto& item : n.items()) {
      out += pad + "-";
      write_value(item, indent, true, out);
    }
  }
}

}  // namespace

std::string to_yaml(const ConfigNode& node) {
  std::string line = inline_text(node, 0);
  if (!line.empty()) return line + "\n";
  std::string out;
  write_block(node, 0, out);
  return out;
}

}  // namespace cnn
