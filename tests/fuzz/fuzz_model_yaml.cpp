// libFuzzer target for the model file reader: YAML text -> Value -> schema check -> ModelSpec ->
// the layers' constructors reading their attributes. Any input must either be accepted or throw
// cnn::ConfigError (anything else escaping, a failed internal CNN_CHECK, a crash, a sanitizer
// report, or more than the reader's caps in time or memory is a finding). An accepted model's
// resolved config must read back to itself. A first line "#set KEY=VALUE" is applied as --set.
// Traps: CNN_FUZZ_WRITE_DICT=FILE only writes a libFuzzer dictionary of every declared key and
// choice and exits; CNN_FUZZ_GRAPH=1 also builds the graph (shape inference: overflow checks
// live there, so findings may belong to that code).
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>

#include "config/model_spec.h"
#include "graph/graph.h"
#include "layers/registry.h"

using namespace cnn;

namespace {

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz_model_yaml: %s\n", what.c_str());
  std::abort();
}

void collect(const Schema& s, std::set<std::string>& words) {
  auto add_type = [&](const Type& t, auto&& self) -> void {
    for (const std::string& c : t.choices()) words.insert(c);
    if (t.schema()) collect(*t.schema(), words);
    for (const Type& f : t.forms()) self(f, self);
  };
  auto add_keys = [&](const std::vector<Key>& keys) {
    for (const Key& k : keys) {
      words.insert(k.name + ":");
      add_type(k.type, add_type);
    }
  };
  add_keys(s.keys());
  for (const std::string& v : s.variants()) {
    words.insert(v);
    add_keys(s.keys_for(v));
  }
}

void write_dict(const char* path) {
  std::set<std::string> words{"{", "}", "[", "]", ": ", ", ", "- ", "\n  ", "&a ", "*a", "\"", "'", "~", "null",
                              "true", "false", ".inf", ".nan", "-1", "0", "1048577", "9223372036854775808", "1e999",
                              "\xff", "#set "};
  collect(*model_schema(LayerRegistry::builtin().schemas()), words);
  std::ofstream out(path);
  for (const std::string& w : words) {
    out << '"';
    for (unsigned char c : w) {
      if (c == '"' || c == '\\') out << '\\' << c;
      else if (c < 0x20 || c >= 0x7f) out << fmt::format("\\x{:02x}", c);
      else out << c;
    }
    out << "\"\n";
  }
}

const bool kGraph = [] {
  const char* g = std::getenv("CNN_FUZZ_GRAPH");
  return g && *g == '1';
}();

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dict = std::getenv("CNN_FUZZ_WRITE_DICT")) {
    write_dict(dict);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> sets;
  if (text.rfind("#set ", 0) == 0) {
    const size_t nl = text.find('\n');
    sets.push_back(text.substr(5, nl == std::string::npos ? std::string::npos : nl - 5));
  }
  const LayerRegistry& registry = LayerRegistry::builtin();
  ModelSpec spec;
  try {
    spec = parse_model_text(text, "fuzz.yaml", sets, registry.schemas());
  } catch (const ConfigError&) {
    return 0;
  } catch (const std::exception& e) {
    finding(std::string("the reader threw something other than a ConfigError: ") + e.what());
  }
  const std::string resolved = to_yaml(spec.config);
  try {
    const std::string again = to_yaml(parse_model_text(resolved, "resolved.yaml", {}, registry.schemas()).config);
    if (again != resolved) finding("the resolved config does not read back to itself:\n" + resolved + "---\n" + again);
  } catch (const std::exception& e) {
    finding(std::string("the resolved config is refused: ") + e.what() + "\n" + resolved);
  }
  try {
    for (const LayerSpec& l : spec.layers) registry.create(l);
    if (kGraph) Graph::build(spec);
  } catch (const ConfigError&) {
  } catch (const std::exception& e) {
    finding(std::string("building the layers threw something other than a ConfigError: ") + e.what());
  }
  return 0;
}
