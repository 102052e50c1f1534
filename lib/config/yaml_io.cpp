// The only yaml-cpp user: YAML text -> Value (1-based file:line:col) through yaml-cpp's event
// parser, and Value -> block-style YAML text. Bounded: the text is checked for UTF-8 first, and
// nodes, alias expansions and depth are counted as the events arrive, so a hostile file fails
// before it costs memory (yaml-cpp's own node tree would share aliased nodes and leave the
// exponential expansion to whoever walks it).
// Traps: yaml-cpp marks are 0-based and a null value's mark may be the next token's, so a null map
// value is located at its key; yaml-cpp keeps duplicate keys, so the builder rejects them; plain
// "3" and quoted "3" differ only by the tag ("?" plain, "!" quoted).
#include "config/value.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/parser.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <memory>
#include <sstream>
#include <unordered_map>

namespace cnn {

namespace {

// ---- scalar kinds of the YAML 1.2 core schema

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

// [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)? and .inf/.nan in their three spellings.
bool is_float_text(const std::string& s) {
  const std::string t = s.substr(skip_sign(s));
  if (t == ".inf" || t == ".Inf" || t == ".INF") return true;
  if (s == t && (t == ".nan" || t == ".NaN" || t == ".NAN")) return true;
  size_t i = skip_sign(s), digits = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i, ++digits;
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i, ++digits;
  }
  if (digits == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    size_t start = i + ((i < s.size() && (s[i] == '+' || s[i] == '-')) ? 1 : 0);
    return all_digits(s, start, s.size());
  }
  return i == s.size();
}

Value::Kind plain_kind(const std::string& s) {
  if (is_int_text(s)) return Value::Kind::integer;
  if (is_float_text(s)) return Value::Kind::real;
  if (is_bool_text(s)) return Value::Kind::boolean;
  return Value::Kind::string;
}

// ---- UTF-8 and control characters, before yaml-cpp sees the text

// Length of the UTF-8 sequence at s[i] and its code point, or 0 when it is not well formed
// (overlong forms, surrogates and code points above U+10FFFF are not).
size_t utf8_sequence(const std::string& s, size_t i, uint32_t& cp) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (size_t k = 1; k < n; ++k) {
    if ((b(k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(k) & 0x3F);
  }
  static const uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

void check_text(const std::string& text, const std::string& file) {
  int line = 1, col = 1;
  for (size_t i = 0; i < text.size();) {
    uint32_t cp = 0;
    const size_t n = utf8_sequence(text, i, cp);
    if (n == 0)
      throw ConfigError(Location{file, line, col}, "",
                        fmt::format("the text is not valid UTF-8 (byte 0x{:02x}); model files are UTF-8",
                                    static_cast<unsigned char>(text[i])));
    const bool control = (cp < 0x20 && cp != '\t' && cp != '\n' && cp != '\r') || (cp >= 0x7F && cp <= 0x9F) ||
                         cp == 0xFFFE || cp == 0xFFFF;
    if (control)
      throw ConfigError(Location{file, line, col}, "",
                        fmt::format("control character U+{:04X} in the text (only tab, CR and LF are allowed)", cp));
    if (cp == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
    i += n;
  }
}

// ---- the event handler that builds the tree

class TreeBuilder : public YAML::EventHandler {
public:
  explicit TreeBuilder(std::string file) : m_file(std::move(file)) {}

  Value take_root() {
    if (!m_has_root) m_root.set_where(Location{m_file, 1, 1});
    return std::move(m_root);
  }

  // A yaml-cpp syntax error, naming the flow collection it happened in ("{ ... " never closed).
  ConfigError syntax_error(const YAML::Exception& e) const {
    std::string message = "YAML syntax error: " + e.msg;
    for (auto f = m_stack.rbegin(); f != m_stack.rend(); ++f) {
      if (!f->flow) continue;
      const char open = f->node.is_map() ? '{' : '[';
      const bool unclosed = e.msg.find("flow") != std::string::npos;
      message += fmt::format(" ({} '{}' opened at {}:{})", unclosed ? "unclosed" : "inside the", open,
                             f->node.where().line, f->node.where().col);
      break;
    }
    return ConfigError(at(e.mark, Location{m_file, 0, 0}), "", message);
  }

  void OnDocumentStart(const YAML::Mark& mark) override {
    if (++m_documents > 1)
      throw ConfigError(at(mark, Location{m_file, 0, 0}), "", "expected one YAML document, found a second one starting here");
  }
  void OnDocumentEnd() override {}

  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    if (key_expected()) throw ConfigError(at(mark, top().node.where()), top().node.path(), "expected a map key (a name), found a missing key");
    count(1, at(mark, parent_where()));
    Value v;
    Frame* f = m_stack.empty() ? nullptr : &top();
    // "key:" has no value to point at: locate it at its key.
    v.set_where(f && f->node.is_map() ? f->key_where : at(mark, parent_where()));
    attach(std::move(v), anchor, true);
  }

  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    const Location where = at(mark, parent_where());
    if (key_expected()) throw ConfigError(where, top().node.path(), "expected a map key (a name), found an alias");
    auto it = m_anchors.find(anchor);
    if (it == m_anchors.end())
      throw ConfigError(where, "", "an alias to a collection that contains it (a recursive alias)");
    m_alias_nodes += it->second.nodes;
    if (m_alias_nodes > kMaxAliasNodes)
      throw ConfigError(where, "",
                        fmt::format("aliases expand to more than {} nodes in all (an alias bomb?); write the values out",
                                    kMaxAliasNodes));
    count(it->second.nodes, where);
    attach(*it->second.value, 0, true);
  }

  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                const std::string& text) override {
    const Location where = at(mark, parent_where());
    count(1, where);
    if (key_expected()) {
      Frame& f = top();
      auto [first, fresh] = f.seen.emplace(text, where);
      if (!fresh)
        throw ConfigError(where, child_path(f.node.path(), text),
                          fmt::format("duplicate key '{}' (first written at line {}, column {})", text,
                                      first->second.line, first->second.col));
      f.key = text;
      f.key_where = where;
      f.expect_key = false;
      if (anchor != 0) m_anchors[anchor] = Anchored{std::make_shared<const Value>(Value::scalar(plain_kind(text), text, where)), 1};
      return;
    }
    // yaml-cpp tags quoted scalars "!" and plain ones "?"; an explicit !!str is a string too.
    const bool quoted = tag == "!" || tag == "tag:yaml.org,2002:str";
    attach(Value::scalar(quoted ? Value::Kind::string : plain_kind(text), text, where, quoted), anchor, true);
  }

  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value style) override {
    open(Value::list(at(mark, parent_where())), anchor, style);
  }
  void OnSequenceEnd() override { close(); }

  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value style) override {
    open(Value::map(at(mark, parent_where())), anchor, style);
  }
  void OnMapEnd() override { close(); }

private:
  struct Frame {
    Value node;
    YAML::anchor_t anchor = 0;
    bool flow = false;
    size_t nodes_at_start = 0;
    bool expect_key = true;  // maps: the next scalar is a key
    std::string key;
    Location key_where;
    std::unordered_map<std::string, Location> seen;
  };
  struct Anchored {
    std::shared_ptr<const Value> value;
    size_t nodes = 0;
  };

  Location at(const YAML::Mark& mark, const Location& fallback) const {
    if (mark.is_null() || mark.line < 0) return fallback;
    return Location{m_file, mark.line + 1, mark.column + 1};
  }
  Frame& top() { return m_stack.back(); }
  const Frame& top() const { return m_stack.back(); }
  bool key_expected() const { return !m_stack.empty() && top().node.is_map() && top().expect_key; }
  Location parent_where() const { return m_stack.empty() ? Location{m_file, 1, 1} : top().node.where(); }

  void count(size_t nodes, const Location& where) {
    m_nodes += nodes;
    if (m_nodes > kMaxYamlNodes)
      throw ConfigError(where, "", fmt::format("more than {} YAML nodes (aliases counted expanded)", kMaxYamlNodes));
  }

  void open(Value node, YAML::anchor_t anchor, YAML::EmitterStyle::value style) {
    if (key_expected())
      throw ConfigError(node.where(), top().node.path(),
                        fmt::format("expected a map key (a name), found a {}", node.is_map() ? "map" : "list"));
    if (m_stack.size() >= static_cast<size_t>(kMaxYamlDepth))
      throw ConfigError(node.where(), "", fmt::format("nested deeper than {} levels", kMaxYamlDepth));
    count(1, node.where());
    Frame f;
    if (!m_stack.empty()) {
      const Frame& p = top();
      const std::string path = p.node.is_map() ? child_path(p.node.path(), p.key) : item_path(p.node.path(), p.node.size());
      node.set_path_recursive(path);
    }
    f.node = std::move(node);
    f.anchor = anchor;
    f.flow = style == YAML::EmitterStyle::Flow;
    f.nodes_at_start = m_nodes - 1;
    m_stack.push_back(std::move(f));
  }

  void close() {
    Frame f = std::move(top());
    m_stack.pop_back();
    const size_t nodes = m_nodes - f.nodes_at_start;
    if (f.anchor != 0) m_anchors[f.anchor] = Anchored{std::make_shared<const Value>(f.node), nodes};
    attach(std::move(f.node), 0, false);
  }

  // Puts a complete value where the parser is: the root, the next list item or the pending key's
  // value. A collection got its path when it was opened; leaves and alias copies get theirs here
  // (so building stays linear in the nodes, not nodes x depth).
  void attach(Value v, YAML::anchor_t anchor, bool set_paths) {
    if (anchor != 0) m_anchors[anchor] = Anchored{std::make_shared<const Value>(v), 1};
    if (m_stack.empty()) {
      if (set_paths) v.set_path_recursive("");
      m_root = std::move(v);
      m_has_root = true;
      return;
    }
    Frame& f = top();
    if (f.node.is_list()) {
      if (set_paths) v.set_path_recursive(item_path(f.node.path(), f.node.size()));
      f.node.mutable_items().push_back(std::move(v));
      return;
    }
    if (set_paths) v.set_path_recursive(child_path(f.node.path(), f.key));
    v.set_where(v.where(), f.key_where);
    f.node.mutable_entries().emplace_back(f.key, std::move(v));
    f.expect_key = true;
  }

  std::string m_file;
  std::vector<Frame> m_stack;
  Value m_root;
  bool m_has_root = false;
  int m_documents = 0;
  size_t m_nodes = 0;
  size_t m_alias_nodes = 0;
  std::unordered_map<YAML::anchor_t, Anchored> m_anchors;
};

}  // namespace

Value parse_yaml(const std::string& text, const std::string& file_name) {
  if (text.size() > kMaxYamlBytes)
    throw ConfigError(Location{file_name, 0, 0}, "",
                      fmt::format("{} bytes of YAML, more than the limit of {} MiB", text.size(), kMaxYamlBytes >> 20));
  check_text(text, file_name);
  std::istringstream in(text);
  TreeBuilder builder(file_name);
  try {
    YAML::Parser parser(in);
    while (parser.HandleNextDocument(builder)) {
    }
  } catch (const YAML::Exception& e) {
    throw builder.syntax_error(e);
  }
  return builder.take_root();
}

namespace {

std::string file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

[[noreturn]] void unreadable(const std::string& path, const std::string& why) {
  throw ConfigError(Location{path, 0, 0}, "", fmt::format("cannot read '{}': {}", path, why));
}

}  // namespace

Value load_yaml_file(const std::string& path) {
  // stat before open: opening a FIFO for reading would block until a writer comes.
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) unreadable(path, errno == ENOENT ? "no such file" : std::strerror(errno));
  if (!S_ISREG(st.st_mode)) unreadable(path, "it is " + file_kind(st.st_mode) + ", expected a YAML file");
  const auto too_large = [&](uint64_t bytes) {
    unreadable(path, fmt::format("{} bytes, more than the limit of {} MiB for a YAML file", bytes, kMaxYamlBytes >> 20));
  };
  if (static_cast<uint64_t>(st.st_size) > kMaxYamlBytes) too_large(static_cast<uint64_t>(st.st_size));
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) unreadable(path, std::strerror(errno));
  std::string text;
  std::string error;
  struct stat fst{};
  if (::fstat(fd, &fst) != 0 || !S_ISREG(fst.st_mode)) {
    error = "it changed into something other than a regular file while being opened";
  } else {
    char buf[65536];
    while (text.size() <= kMaxYamlBytes) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n == 0) break;
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        error = std::strerror(errno);
        break;
      }
      text.append(buf, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  if (!error.empty()) unreadable(path, error);
  if (text.size() > kMaxYamlBytes) too_large(text.size());
  return parse_yaml(text, path);
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

std::string scalar_text(const Value& n) {
  const std::string& v = n.text();
  if (!plain_safe(v) || (n.quoted() && looks_typed(v))) return double_quoted(v);
  return v;
}

constexpr size_t kFlowWidth = 72;

// The one-line form of a value, or "" when it should be written as a block.
std::string inline_text(const Value& n, size_t indent) {
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

void write_block(const Value& n, size_t indent, std::string& out);

// Writes the value after "key:" or "-": on the same line when it fits, else as an indented block.
void write_value(const Value& v, size_t indent, bool after_dash, std::string& out) {
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

void write_block(const Value& n, size_t indent, std::string& out) {
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

std::string to_yaml(const Value& value) {
  std::string line = inline_text(value, 0);
  if (!line.empty()) return line + "\n";
  std::string out;
  write_block(value, 0, out);
  return out;
}

}  // namespace cnn
