// The YAML reader and writer and --set overrides on Value: locations, scalar kinds, duplicate
// keys, syntax errors (naming the unclosed flow collection), the round trip.
// Trap: YAML texts here start on line 1 right after R"( so the line:col numbers in the checks are
// the ones you count in the literal.
#include <string>

#include "config/value.h"
#include "config_test_util.h"
#include "support/catch.h"
#include "support/test_util.h"

using cnn::ConfigError;
using cnn::parse_yaml;
using cnn::Value;
using cnn::test::config_error;

namespace {

// Equal as configs: same kinds, keys in the same order, same scalar text and quoting.
bool same_tree(const Value& a, const Value& b) {
  if (a.kind() != b.kind() || a.size() != b.size()) return false;
  if (a.is_scalar()) return a.text() == b.text() && a.quoted() == b.quoted();
  for (size_t i = 0; i < a.entries().size(); ++i) {
    if (a.entries()[i].first != b.entries()[i].first) return false;
    if (!same_tree(a.entries()[i].second, b.entries()[i].second)) return false;
  }
  for (size_t i = 0; i < a.items().size(); ++i)
    if (!same_tree(a.items()[i], b.items()[i])) return false;
  return true;
}

std::vector<std::string> keys(const Value& map) {
  std::vector<std::string> out;
  for (const auto& [k, v] : map.entries()) out.push_back(k);
  return out;
}

}  // namespace

TEST_CASE("yaml reader gives every value and key a 1-based line and column", "[cpu]") {
  Value root = parse_yaml(R"(a: 1
b:
  c: [x, y]
  d:
    - {e: 5}
)", "t.yaml");
  const Value& a = root["a"];
  CHECK(a.where().file == "t.yaml");
  CHECK(a.where().line == 1);
  CHECK(a.where().col == 4);
  CHECK(a.key_where().col == 1);
  const Value& y = root["b"]["c"][1];
  CHECK(y.path() == "b.c[1]");
  CHECK(y.where().line == 3);
  CHECK(y.where().col == 10);
  const Value& e = root["b"]["d"][0]["e"];
  CHECK(e.path() == "b.d[0].e");
  CHECK(e.where().line == 5);
  CHECK(e.where().col == 11);
  CHECK(e.key_where().col == 8);
}

TEST_CASE("map keys keep the order of the file", "[cpu]") {
  CHECK(keys(parse_yaml("zeta: 1\nalpha: 2\nmid: 3\n", "t.yaml")) == std::vector<std::string>{"zeta", "alpha", "mid"});
}

TEST_CASE("plain scalars take their YAML 1.2 core-schema kind, quoted ones are strings", "[cpu]") {
  Value root = parse_yaml("a: \"3\"\nb: 3\nc: 'true'\nd: 1e-4\ne: .inf\nf: True\ng: yes\nh: +7\ni: !!str 5\n", "t.yaml");
  CHECK(root["a"].kind() == Value::Kind::string);
  CHECK(root["a"].quoted());
  CHECK(root["a"].describe() == "the string '3'");
  CHECK(root["b"].kind() == Value::Kind::integer);
  CHECK(root["b"].integer() == 3);
  CHECK(root["c"].kind() == Value::Kind::string);
  CHECK(root["d"].kind() == Value::Kind::real);
  CHECK(root["d"].real() == 1e-4);
  CHECK(std::isinf(root["e"].real()));
  CHECK(root["f"].boolean());
  CHECK(root["g"].kind() == Value::Kind::string);  // YAML 1.1's yes is a word in 1.2
  CHECK(root["h"].integer() == 7);
  CHECK(root["i"].kind() == Value::Kind::string);
}

TEST_CASE("empty and null values are null values located at their key", "[cpu]") {
  Value root = parse_yaml("a:\nb: ~\nc: null\nd: \"\"\n", "t.yaml");
  CHECK(root["a"].is_null());
  CHECK(root["b"].is_null());
  CHECK(root["c"].is_null());
  CHECK(root["a"].where().line == 1);
  CHECK(root["a"].where().col == 1);
  CHECK(root["d"].string().empty());
  CHECK(root["d"].describe() == "an empty string");
}

TEST_CASE("a duplicate map key is an error at its second occurrence", "[cpu]") {
  ConfigError e = config_error([] { parse_yaml("a: 1\nb:\n  c: 1\n  c: 2\n", "dup.yaml"); });
  CHECK(std::string(e.what()) == "dup.yaml:4:3: 'b.c': duplicate key 'c' (first written at line 3, column 3)");
}

TEST_CASE("a map key must be a name", "[cpu]") {
  CHECK(config_error([] { parse_yaml("? [a]\n: 1\n", "k.yaml"); }).message() ==
        "expected a map key (a name), found a list");
  CHECK(config_error([] { parse_yaml(": 1\n", "k.yaml"); }).message() ==
        "expected a map key (a name), found a missing key");
}

TEST_CASE("a YAML syntax error carries the location yaml-cpp reports", "[cpu]") {
  ConfigError e = config_error([] { parse_yaml("a: 1\nb: [1, 2\nc: 3\n", "bad.yaml"); });
  CHECK(e.where().file == "bad.yaml");
  CHECK(e.where().line >= 2);
  CHECK(e.message().rfind("YAML syntax error: ", 0) == 0);
  ConfigError tab = config_error([] { parse_yaml("a: 1\n  b: 2\n", "bad.yaml"); });
  CHECK(tab.where().line == 2);
  CHECK(tab.where().col == 4);
  CHECK(tab.message().rfind("YAML syntax error: ", 0) == 0);
  ConfigError two = config_error([] { parse_yaml("a: 1\n---\nb: 2\n", "bad.yaml"); });
  CHECK(two.message() == "expected one YAML document, found a second one starting here");
  CHECK(two.where().line == 2);
}

TEST_CASE("a syntax error inside a flow collection names where it was opened", "[cpu]") {
  // The issue's case: a '{' opened on line 7 that never closes is reported two lines later.
  const std::string text = "name: x\na: 1\nb: 2\nc: 3\nd: 4\ne: 5\ntrain: {epochs: 1, batch_size: 2\n\n  x: 1\n";
  ConfigError e = config_error([&] { parse_yaml(text, "m.yaml"); });
  CHECK(e.where().line == 9);
  CHECK(e.message() == "YAML syntax error: end of map flow not found (unclosed '{' opened at 7:8)");
  ConfigError seq = config_error([] { parse_yaml("a: {b: [1, 2}\n", "m.yaml"); });
  CHECK(seq.message().find("(unclosed '[' opened at 1:8)") != std::string::npos);
  // Outside any flow collection nothing is added.
  CHECK(config_error([] { parse_yaml("a: 1\n  b: 2\n", "m.yaml"); }).message().find("opened at") == std::string::npos);
}

TEST_CASE("to_yaml output parses back to an equal tree", "[cpu]") {
  const std::string text = R"(name: "3"
plain: 3
float: 1.5e-3
flag: false
text: "a: b # not a comment"
quote: "say \"hi\"\nnext line"
words: hello world
unicode: é
empty_string: ""
nothing:
looks_null: "null"
looks_bool: "True"
yes_word: "yes"
dash: "-x"
path: datasets/fer2013/fer2013.csv
shape: [64, 1, 48, 48]
empty_list: []
empty_map: {}
nested:
  - [1, [2, 3]]
  - {a: 1, b: [x, "y, z"]}
  - - deep
    - {k: v}
layers:
  - {name: conv1, type: conv2d, kernel: [3, 3]}
  - name: fc
    units: 7
)";
  Value tree = parse_yaml(text, "m.yaml");
  std::string out = to_yaml(tree);
  Value back = parse_yaml(out, "out.yaml");
  INFO(out);
  CHECK(same_tree(tree, back));
  CHECK(to_yaml(back) == out);
  CHECK(out.find("shape: [64, 1, 48, 48]\n") != std::string::npos);
  CHECK(out.find("name: \"3\"\n") != std::string::npos);
  CHECK(out.find("float: 1.5e-3\n") != std::string::npos);  // the spelling written is kept
  CHECK(out.find("layers:\n  - name: conv1\n    type: conv2d\n    kernel: [3, 3]\n") != std::string::npos);
  CHECK(back["name"].quoted());
  CHECK(!back["plain"].quoted());
  CHECK(back["nothing"].is_null());
  Value changed = back;
  changed.mutable_entries()[0].second = Value::scalar(Value::Kind::integer, "4");
  CHECK(!same_tree(tree, changed));
}

TEST_CASE("overrides set values by dotted path, by index and by layer name", "[cpu]") {
  Value root = parse_yaml(R"(train:
  optimizer: {type: sgd, lr: 0.1}
layers:
  - {name: conv1, filters: 8}
  - {name: conv2, filters: 16}
)", "m.yaml");
  apply_override(root, "train.optimizer.lr=0.05");
  apply_override(root, "layers[0].filters=4");
  apply_override(root, "layers.1.kernel=[3, 5]");
  apply_override(root, "layers.conv2.filters=32");
  apply_override(root, "train.schedule={type: cosine}");
  apply_override(root, "data.path=x.csv");
  CHECK(root["train"]["optimizer"]["lr"].real() == 0.05);
  const Value& layers = root["layers"];
  CHECK(layers[0]["filters"].integer() == 4);
  CHECK(layers[1]["kernel"].pair() == std::pair<int64_t, int64_t>{3, 5});
  CHECK(layers[1]["filters"].integer() == 32);
  CHECK(root["train"]["schedule"]["type"].string() == "cosine");
  CHECK(root["data"]["path"].string() == "x.csv");
  const Value& lr = root["train"]["optimizer"]["lr"];
  CHECK(lr.where().file == "<--set>");
  CHECK(lr.path() == "train.optimizer.lr");
  CHECK(layers[1]["kernel"][1].path() == "layers[1].kernel[1]");
}

TEST_CASE("a bad override names <--set> and the assignment", "[cpu]") {
  Value root = parse_yaml("train:\n  epochs: 3\nlayers:\n  - {name: conv1}\n", "m.yaml");
  ConfigError no_eq = config_error([&] { apply_override(root, "train.epochs"); });
  CHECK(std::string(no_eq.what()) ==
        "<--set>: malformed override 'train.epochs': expected KEY=VALUE, e.g. train.optimizer.lr=0.05");
  CHECK(config_error([&] { apply_override(root, "=3"); }).where().file == "<--set>");
  CHECK(config_error([&] { apply_override(root, "train..epochs=3"); }).message() ==
        "empty key in path 'train..epochs' (in --set train..epochs=3)");
  ConfigError through = config_error([&] { apply_override(root, "train.epochs.max=3"); });
  CHECK(std::string(through.what()) ==
        "<--set>: 'train.epochs.max': cannot set 'train.epochs.max': 'train.epochs' is the number 3, not a map "
        "(in --set train.epochs.max=3)");
  CHECK(config_error([&] { apply_override(root, "layers.conv2.filters=3"); }).message() ==
        "'layers' has no item named 'conv2', did you mean 'conv1'? (in --set layers.conv2.filters=3)");
  CHECK(config_error([&] { apply_override(root, "layers[4].filters=3"); }).message() ==
        "index 4 is out of range: 'layers' has 1 items (in --set layers[4].filters=3)");
  ConfigError yaml = config_error([&] { apply_override(root, "train.epochs=[1, 2"); });
  CHECK(yaml.where().file == "<--set>");
  CHECK(yaml.message().find("the value is not valid YAML") == 0);
  CHECK(yaml.message().find("(in --set train.epochs=[1, 2)") != std::string::npos);
}

TEST_CASE("load_yaml_file reads a file and names a missing one", "[cpu]") {
  cnn::test::TempDir dir;
  cnn::test::write_text_file(dir / "a.yaml", "k: [1, 2]\n");
  Value root = cnn::load_yaml_file((dir / "a.yaml").string());
  CHECK(root["k"][1].where().file == (dir / "a.yaml").string());
  std::string missing = (dir / "nope.yaml").string();
  ConfigError e = config_error([&] { cnn::load_yaml_file(missing); });
  CHECK(e.where().file == missing);
  CHECK(e.message() == "cannot read '" + missing + "': no such file");
  ConfigError d = config_error([&] { cnn::load_yaml_file(dir.path().string()); });
  CHECK(d.message() == "cannot read '" + dir.path().string() + "': it is a directory, expected a YAML file");
}
