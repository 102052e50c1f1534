// ConfigNode and the YAML reader/writer: locations, strict conversions, key bookkeeping,
// overrides and the round trip. Trap: YAML texts here start on line 1 right after R"( so the
// line:col numbers in the checks are the ones you count in the literal.
#include <string>

#include "config/node.h"
#include "support/catch.h"
#include "support/test_util.h"

using cnn::ConfigError;
using cnn::ConfigNode;
using cnn::parse_yaml;

namespace {

template <typename F>
ConfigError config_error(F&& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e;
  }
  FAIL("expected a ConfigError, none was thrown");
  throw std::logic_error("unreachable");
}

// Equal as configs: same kinds, keys in the same order, and scalars that read the same (same
// text, and the same typed-ness: quoted "3" is a string, plain 3 a number).
bool same_tree(const ConfigNode& a, const ConfigNode& b) {
  if (a.kind() != b.kind() || a.size() != b.size()) return false;
  if (a.is_scalar()) return a.as_string() == b.as_string() && a.describe() == b.describe();
  for (size_t i = 0; i < a.entries().size(); ++i) {
    if (a.entries()[i].first != b.entries()[i].first) return false;
    if (!same_tree(a.entries()[i].second, b.entries()[i].second)) return false;
  }
  for (size_t i = 0; i < a.items().size(); ++i)
    if (!same_tree(a.items()[i], b.items()[i])) return false;
  return true;
}

}  // namespace

TEST_CASE("yaml reader gives every node and key a 1-based line and column", "[cpu]") {
  ConfigNode root = parse_yaml(R"(a: 1
b:
  c: [x, y]
  d:
    - {e: 5}
)", "t.yaml");
  ConfigNode& a = root.at("a");
  CHECK(a.where().file == "t.yaml");
  CHECK(a.where().line == 1);
  CHECK(a.where().col == 4);
  CHECK(a.key_where().col == 1);
  ConfigNode& y = root.at("b").at("c")[1];
  CHECK(y.path() == "b.c[1]");
  CHECK(y.where().line == 3);
  CHECK(y.where().col == 10);
  ConfigNode& e = root.at("b").at("d")[0].at("e");
  CHECK(e.path() == "b.d[0].e");
  CHECK(e.where().line == 5);
  CHECK(e.where().col == 11);
  CHECK(e.key_where().col == 8);
}

TEST_CASE("map keys keep the order of the file", "[cpu]") {
  ConfigNode root = parse_yaml("zeta: 1\nalpha: 2\nmid: 3\n", "t.yaml");
  CHECK(root.keys() == std::vector<std::string>{"zeta", "alpha", "mid"});
}

TEST_CASE("quoted scalars are strings, never numbers or booleans", "[cpu]") {
  ConfigNode root = parse_yaml("a: \"3\"\nb: 3\nc: 'true'\n", "t.yaml");
  CHECK(root.get<std::string>("a") == "3");
  CHECK(root.get<int>("b") == 3);
  CHECK(root.get<std::string>("b") == "3");
  ConfigError e = config_error([&] { root.get<int>("a"); });
  CHECK(e.message() == "expected an integer, found the string '3'");
  CHECK(e.key_path() == "a");
  CHECK(e.where().line == 1);
  CHECK(e.where().col == 4);
  CHECK(config_error([&] { root.get<bool>("c"); }).message() == "expected true or false, found the string 'true'");
  CHECK(config_error([&] { root.get<double>("a"); }).message() == "expected a number, found the string '3'");
}

TEST_CASE("empty and null values are null nodes located at their key", "[cpu]") {
  ConfigNode root = parse_yaml("a:\nb: ~\nc: null\nd: \"\"\n", "t.yaml");
  CHECK(root.at("a").is_null());
  CHECK(root.at("b").is_null());
  CHECK(root.at("c").is_null());
  CHECK(root.at("d").is_scalar());
  CHECK(root.at("d").as_string().empty());
  CHECK(!root.has("a"));
  CHECK(root.has("d"));
  ConfigError e = config_error([&] { root.get<int>("a"); });
  CHECK(std::string(e.what()) == "t.yaml:1:1: 'a': expected an integer, found nothing");
  CHECK(root.get<int>("c", 7) == 7);  // null with a fallback: the fallback, written in
  CHECK(root.at("c").as_string() == "7");
}

TEST_CASE("integers are plain decimal: fractions, words, exponents and overflow are rejected", "[cpu]") {
  ConfigNode root = parse_yaml(
      "a: 3.5\nb: abc\nc: 1e3\nd: 99999999999999999999\ne: -12\nf: +7\ng: 3000000000\nh: -1\n", "t.yaml");
  CHECK(config_error([&] { root.get<int64_t>("a"); }).message() == "expected an integer, found the number 3.5");
  CHECK(config_error([&] { root.get<int64_t>("b"); }).message() == "expected an integer, found the string 'abc'");
  CHECK(config_error([&] { root.get<int64_t>("c"); }).message() == "expected an integer, found the number 1e3");
  CHECK(config_error([&] { root.get<int64_t>("d"); }).message() ==
        "expected an integer between -9223372036854775808 and 9223372036854775807, found the number "
        "99999999999999999999");
  CHECK(root.get<int64_t>("e") == -12);
  CHECK(root.get<int>("f") == 7);
  CHECK(root.get<int64_t>("g") == 3000000000LL);
  CHECK(config_error([&] { root.get<int>("g"); }).message() ==
        "expected an integer between -2147483648 and 2147483647, found the number 3000000000");
  CHECK(config_error([&] { root.get<uint64_t>("h"); }).message() ==
        "expected a non-negative integer, found the number -1");
  CHECK(root.get<uint64_t>("g") == 3000000000ULL);
}

TEST_CASE("numbers follow YAML 1.2 and words are rejected", "[cpu]") {
  ConfigNode root = parse_yaml("a: 1e-4\nb: .5\nc: -2\nd: ten\ne: .inf\nf: 1e999\ng: [1]\n", "t.yaml");
  CHECK(root.get<double>("a") == 1e-4);
  CHECK(root.get<double>("b") == 0.5);
  CHECK(root.get<float>("c") == -2.0f);
  CHECK(std::isinf(root.get<double>("e")));
  CHECK(config_error([&] { root.get<double>("d"); }).message() == "expected a number, found the string 'ten'");
  CHECK(config_error([&] { root.get<double>("f"); }).message() ==
        "expected a number within the range of a double, found the number 1e999");
  CHECK(config_error([&] { root.get<double>("g"); }).message() == "expected a number, found a list");
}

TEST_CASE("booleans are true and false in three spellings only", "[cpu]") {
  ConfigNode root = parse_yaml("a: True\nb: FALSE\nc: yes\nd: 1\n", "t.yaml");
  CHECK(root.get<bool>("a"));
  CHECK(!root.get<bool>("b"));
  CHECK(config_error([&] { root.get<bool>("c"); }).message() == "expected true or false, found the string 'yes'");
  CHECK(config_error([&] { root.get<bool>("d"); }).message() == "expected true or false, found the number 1");
}

TEST_CASE("a duplicate map key is an error at its second occurrence", "[cpu]") {
  ConfigError e = config_error([] { parse_yaml("a: 1\nb:\n  c: 1\n  c: 2\n", "dup.yaml"); });
  CHECK(std::string(e.what()) == "dup.yaml:4:3: 'b.c': duplicate key 'c' (first written at line 3, column 3)");
}

TEST_CASE("a YAML syntax error carries the location yaml-cpp reports", "[cpu]") {
  ConfigError e = config_error([] { parse_yaml("a: 1\nb: [1, 2\nc: 3\n", "bad.yaml"); });
  CHECK(e.where().file == "bad.yaml");
  CHECK(e.where().line >= 2);
  CHECK(e.where().col >= 1);
  CHECK(e.message().rfind("YAML syntax error: ", 0) == 0);
  ConfigError tab = config_error([] { parse_yaml("a: 1\n  b: 2\n", "bad.yaml"); });
  CHECK(tab.where().line == 2);
  CHECK(tab.where().col == 4);
  CHECK(tab.message().rfind("YAML syntax error: ", 0) == 0);
  ConfigError two = config_error([] { parse_yaml("a: 1\n---\nb: 2\n", "bad.yaml"); });
  CHECK(two.message() == "expected one YAML document, found a second one starting here");
  CHECK(two.where().line == 3);
}

TEST_CASE("a missing required key is reported at the map that lacks it", "[cpu]") {
  ConfigNode root = parse_yaml("x: 1\ninput:\n  channels: 1\n", "m.yaml");
  ConfigError e = config_error([&] { root.at("input").get<int>("height"); });
  CHECK(std::string(e.what()) == "m.yaml:3:3: 'input': missing required key 'height'");
  ConfigError top = config_error([&] { root.at("layers"); });
  CHECK(std::string(top.what()) == "m.yaml:1:1: missing required key 'layers'");
}

TEST_CASE("getters with a fallback write the default into the tree", "[cpu]") {
  ConfigNode root = parse_yaml("train:\n  epochs: 3\n", "m.yaml");
  ConfigNode& train = root.at("train");
  CHECK(train.get<int>("epochs", 10) == 3);
  CHECK(train.get<double>("lr", 0.01) == 0.01);
  CHECK(train.get<double>("decay", 1.0) == 1.0);
  CHECK(train.get<bool>("shuffle", true));
  CHECK(train.get<std::string>("name", "run") == "run");
  CHECK(train.get_list<int64_t>("sizes", {64, 1, 48, 48}) == std::vector<int64_t>{64, 1, 48, 48});
  CHECK(train.get_choice("mode", {"fast", "slow"}, "fast") == "fast");
  CHECK(train.get_pair("kernel", {3, 5}) == std::pair<int64_t, int64_t>{3, 5});
  CHECK(train.get<float>("scale", 0.1f) == 0.1f);
  CHECK(to_yaml(root) ==
        "train:\n  epochs: 3\n  lr: 0.01\n  decay: 1.0\n  shuffle: true\n  name: run\n"
        "  sizes: [64, 1, 48, 48]\n  mode: fast\n  kernel: [3, 5]\n  scale: 0.1\n");
  train.check_unknown_keys();  // everything there was asked for
}

TEST_CASE("get_pair reads one integer or a pair", "[cpu]") {
  ConfigNode root = parse_yaml("k: 3\ns: [1, 2]\nbad: [1, 2, 3]\n", "m.yaml");
  CHECK(root.get_pair("k", {1, 1}) == std::pair<int64_t, int64_t>{3, 3});
  CHECK(root.get_pair("s", {1, 1}) == std::pair<int64_t, int64_t>{1, 2});
  CHECK(config_error([&] { root.get_pair("bad", {1, 1}); }).message() ==
        "expected an integer or a pair [a, b], found a list");
}

TEST_CASE("get_choice lists the choices and suggests the closest one", "[cpu]") {
  ConfigNode root = parse_yaml("opt:\n  type: adma\n", "m.yaml");
  ConfigError e = config_error([&] { root.at("opt").get_choice("type", {"sgd", "adam", "adamw"}); });
  CHECK(std::string(e.what()) ==
        "m.yaml:2:9: 'opt.type': expected one of sgd, adam, adamw, found 'adma', did you mean 'adam'?");
}

TEST_CASE("check_unknown_keys reports the first unread key at the key, with a suggestion", "[cpu]") {
  ConfigNode root = parse_yaml("conv:\n  filters: 8\n  kernal: 3\n  stride: 1\n", "m.yaml");
  ConfigNode& conv = root.at("conv");
  conv.get<int>("filters");
  conv.get<int>("kernel", 1);
  conv.get<int>("stride", 1);
  ConfigError e = config_error([&] { root.check_unknown_keys(); });
  CHECK(std::string(e.what()) == "m.yaml:3:3: 'conv.kernal': unknown key 'kernal', did you mean 'kernel'?");
  conv.mark_known({"kernal"});
  root.check_unknown_keys();
}

TEST_CASE("check_unknown_keys recurses into lists of maps and into maps nobody read", "[cpu]") {
  ConfigNode root = parse_yaml(R"(layers:
  - {name: a, units: 3}
  - {name: b, unit: 3}
extra:
  deep: {x: 1}
)", "m.yaml");
  ConfigNode& layers = root.at("layers");
  for (size_t i = 0; i < layers.size(); ++i) {
    layers[i].get<std::string>("name");
    layers[i].get<int>("units", 1);
  }
  // A sub-map nobody asked for is reported at its parent, before anything inside it.
  CHECK(config_error([&] { root.check_unknown_keys(false); }).message() ==
        "unknown key 'extra' (known keys here: layers)");
  root.mark_known({"extra"});
  root.check_unknown_keys(false);
  ConfigError e = config_error([&] { root.check_unknown_keys(true); });
  CHECK(std::string(e.what()) == "m.yaml:3:15: 'layers[1].unit': unknown key 'unit', did you mean 'units'?");
  layers[1].mark_known({"unit"});
  ConfigError unread = config_error([&] { root.check_unknown_keys(true); });
  CHECK(std::string(unread.what()) == "m.yaml:5:3: 'extra.deep': unknown key 'deep'");
}

TEST_CASE("an unknown key with no close match lists the keys that are known", "[cpu]") {
  ConfigNode root = parse_yaml("epochs: 1\nzzz: 2\n", "m.yaml");
  root.get<int>("epochs");
  root.get<int>("batch_size", 4);
  CHECK(config_error([&] { root.check_unknown_keys(); }).message() ==
        "unknown key 'zzz' (known keys here: batch_size, epochs)");
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
  ConfigNode tree = parse_yaml(text, "m.yaml");
  std::string out = to_yaml(tree);
  ConfigNode back = parse_yaml(out, "out.yaml");
  INFO(out);
  CHECK(same_tree(tree, back));
  CHECK(to_yaml(back) == out);
  CHECK(out.find("shape: [64, 1, 48, 48]\n") != std::string::npos);
  CHECK(out.find("name: \"3\"\n") != std::string::npos);
  CHECK(out.find("layers:\n  - name: conv1\n    type: conv2d\n    kernel: [3, 3]\n") != std::string::npos);
  CHECK(back.at("name").quoted());
  CHECK(!back.at("plain").quoted());
  CHECK(back.at("nothing").is_null());
  ConfigNode changed = back.clone();
  changed.at("nested")[1].set("a", ConfigNode::scalar("2"));
  CHECK(!same_tree(tree, changed));
}

TEST_CASE("overrides set values by dotted path, by index and by layer name", "[cpu]") {
  ConfigNode root = parse_yaml(R"(train:
  optimizer: {type: sgd, lr: 0.1}
layers:
  - {name: conv1, filters: 8}
  - {name: conv2, filters: 16}
)", "m.yaml");
  root.apply_override("train.optimizer.lr=0.05");
  root.apply_override("layers[0].filters=4");
  root.apply_override("layers.1.kernel=[3, 5]");
  root.apply_override("layers.conv2.filters=32");
  root.apply_override("train.schedule={type: cosine}");
  root.apply_override("data.path=x.csv");
  CHECK(root.at("train").at("optimizer").get<double>("lr") == 0.05);
  ConfigNode& layers = root.at("layers");
  CHECK(layers[0].get<int>("filters") == 4);
  CHECK(layers[1].get_pair("kernel", {1, 1}) == std::pair<int64_t, int64_t>{3, 5});
  CHECK(layers[1].get<int>("filters") == 32);
  CHECK(root.at("train").at("schedule").get<std::string>("type") == "cosine");
  CHECK(root.at("data").get<std::string>("path") == "x.csv");
  ConfigNode& lr = root.at("train").at("optimizer").at("lr");
  CHECK(lr.where().file == "<--set>");
  CHECK(lr.path() == "train.optimizer.lr");
  CHECK(layers[1].at("kernel")[1].path() == "layers[1].kernel[1]");
}

TEST_CASE("a bad override names <--set> and the assignment", "[cpu]") {
  ConfigNode root = parse_yaml("train:\n  epochs: 3\nlayers:\n  - {name: conv1}\n", "m.yaml");
  ConfigError no_eq = config_error([&] { root.apply_override("train.epochs"); });
  CHECK(std::string(no_eq.what()) ==
        "<--set>: malformed override 'train.epochs': expected KEY=VALUE, e.g. train.optimizer.lr=0.05");
  CHECK(config_error([&] { root.apply_override("=3"); }).where().file == "<--set>");
  CHECK(config_error([&] { root.apply_override("train..epochs=3"); }).message() ==
        "empty key in path 'train..epochs' (in --set train..epochs=3)");
  ConfigError through = config_error([&] { root.apply_override("train.epochs.max=3"); });
  CHECK(std::string(through.what()) ==
        "<--set>: 'train.epochs.max': cannot set 'train.epochs.max': 'train.epochs' is the number 3, not a map "
        "(in --set train.epochs.max=3)");
  CHECK(config_error([&] { root.apply_override("layers.conv2.filters=3"); }).message() ==
        "'layers' has no item named 'conv2', did you mean 'conv1'? (in --set layers.conv2.filters=3)");
  CHECK(config_error([&] { root.apply_override("layers[4].filters=3"); }).message() ==
        "index 4 is out of range: 'layers' has 1 items (in --set layers[4].filters=3)");
  ConfigError yaml = config_error([&] { root.apply_override("train.epochs=[1, 2"); });
  CHECK(yaml.where().file == "<--set>");
  CHECK(yaml.message().find("the value is not valid YAML") == 0);
  CHECK(yaml.message().find("(in --set train.epochs=[1, 2)") != std::string::npos);
  root.apply_override("train.epochs=many");
  ConfigError later = config_error([&] { root.at("train").get<int>("epochs"); });
  CHECK(std::string(later.what()) == "<--set>: 'train.epochs': expected an integer, found the string 'many'");
}

TEST_CASE("load_yaml_file reads a file and names a missing one", "[cpu]") {
  cnn::test::TempDir dir;
  cnn::test::write_text_file(dir / "a.yaml", "k: [1, 2]\n");
  ConfigNode root = cnn::load_yaml_file((dir / "a.yaml").string());
  CHECK(root.at("k")[1].where().file == (dir / "a.yaml").string());
  std::string missing = (dir / "nope.yaml").string();
  ConfigError e = config_error([&] { cnn::load_yaml_file(missing); });
  CHECK(e.where().file == missing);
  CHECK(e.message() == "cannot read '" + missing + "': no such file");
}

TEST_CASE("clone copies the tree and forgets which keys were read", "[cpu]") {
  ConfigNode root = parse_yaml("a: 1\nb: {c: 2}\n", "m.yaml");
  root.get<int>("a");
  root.at("b").get<int>("c");
  root.check_unknown_keys();
  ConfigNode copy = root.clone();
  CHECK(same_tree(root, copy));
  CHECK(config_error([&] { copy.check_unknown_keys(); }).message() == "unknown key 'a'");
}
