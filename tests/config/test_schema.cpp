// Key declarations and the checker: types and ranges with the messages users read, defaults
// written in declaration order with given() false, unknown keys with the closest key (or the
// section that has it), variants by `type`, forms picked by what was written.
#include <string>

#include "config/schema.h"
#include "config_test_util.h"
#include "support/catch.h"

using namespace cnn;
using cnn::test::config_error;

namespace {

Value checked(const std::string& yaml, const Schema& s) {
  return check(parse_yaml(yaml, "t.yaml"), Type::map(std::make_shared<Schema>(s)));
}

std::string error_of(const std::string& yaml, const Schema& s) {
  return config_error([&] { checked(yaml, s); }).what();
}

Schema one_key(Type t) {
  Schema s("test");
  s.key("k", std::move(t), "the key");
  return s;
}

}  // namespace

TEST_CASE("integers are plain decimal within their declared range", "[cpu]") {
  const Schema s = one_key(Type::integer(1, 100));
  CHECK(checked("k: 7", s)["k"].integer() == 7);
  CHECK(checked("k: +7", s)["k"].integer() == 7);
  CHECK(error_of("k: 0", s) == "t.yaml:1:4: 'k': expected an integer in [1, 100], found the number 0");
  CHECK(error_of("k: 3.5", s) == "t.yaml:1:4: 'k': expected an integer in [1, 100], found the number 3.5");
  CHECK(error_of("k: 1e3", s) == "t.yaml:1:4: 'k': expected an integer in [1, 100], found the number 1e3");
  CHECK(error_of("k: \"3\"", s) == "t.yaml:1:4: 'k': expected an integer in [1, 100], found the string '3'");
  CHECK(error_of("k: 99999999999999999999", s) ==
        "t.yaml:1:4: 'k': expected an integer in [1, 100], found the number 99999999999999999999");
  CHECK(error_of("k: [1]", s) == "t.yaml:1:4: 'k': expected an integer in [1, 100], found a list");
  const Schema any = one_key(Type::integer(0));
  CHECK(error_of("k: -1", any).find("expected an integer >= 0, found the number -1") != std::string::npos);
  const Schema u = one_key(Type::uinteger());
  CHECK(checked("k: 18446744073709551615", u)["k"].uinteger() == 18446744073709551615ULL);
  CHECK(error_of("k: -1", u).find("expected a non-negative integer, found the number -1") != std::string::npos);
  CHECK(error_of("k: 18446744073709551616", u).find("expected a non-negative integer") != std::string::npos);
}

TEST_CASE("numbers are finite and within their declared range", "[cpu]") {
  CHECK(checked("k: 1e-4", one_key(Type::positive()))["k"].real() == 1e-4);
  CHECK(checked("k: 3", one_key(Type::positive()))["k"].real() == 3.0);  // an integer is a number
  CHECK(error_of("k: 0", one_key(Type::positive())).find("expected a positive number, found the number 0") !=
        std::string::npos);
  CHECK(error_of("k: .inf", one_key(Type::real())).find("expected a number, found the number .inf") != std::string::npos);
  CHECK(error_of("k: .nan", one_key(Type::real())).find("expected a number, found the number .nan") != std::string::npos);
  CHECK(error_of("k: 1e999", one_key(Type::real())).find("expected a number within the range of a double") !=
        std::string::npos);
  CHECK(error_of("k: 1.0", one_key(Type::real(0, 1, false, true))).find("expected a number in [0, 1), found the number 1.0") !=
        std::string::npos);
  CHECK(error_of("k: ten", one_key(Type::real())).find("expected a number, found the string 'ten'") != std::string::npos);
}

TEST_CASE("booleans, strings, names and choices", "[cpu]") {
  CHECK(checked("k: TRUE", one_key(Type::boolean()))["k"].boolean());
  CHECK(error_of("k: yes", one_key(Type::boolean())).find("expected true or false, found the string 'yes'") !=
        std::string::npos);
  CHECK(error_of("k: 1", one_key(Type::boolean())).find("expected true or false, found the number 1") != std::string::npos);
  CHECK(checked("k: 3", one_key(Type::string()))["k"].string() == "3");  // any scalar reads as text
  CHECK(error_of("k: \"\"", one_key(Type::string(true).expect("a class name"))).find(
            "expected a class name, found an empty string") != std::string::npos);
  CHECK(error_of("k: a.b", one_key(Type::name())).find("expected a name of letters, digits, '_' and '-', found the "
                                                       "string 'a.b'") != std::string::npos);
  CHECK(error_of("k: adma", one_key(Type::choice({"sgd", "adam", "adamw"}))) ==
        "t.yaml:1:4: 'k': expected one of sgd, adam, adamw, found 'adma', did you mean 'adam'?");
}

TEST_CASE("pairs and lists check each item at its own location", "[cpu]") {
  const Schema p = one_key(Type::int_pair(1, 10));
  CHECK(checked("k: 3", p)["k"].pair() == std::pair<int64_t, int64_t>{3, 3});
  CHECK(checked("k: [1, 2]", p)["k"].pair() == std::pair<int64_t, int64_t>{1, 2});
  CHECK(error_of("k: [1, 2, 3]", p) ==
        "t.yaml:1:4: 'k': expected an integer in [1, 10] or a pair [h, w] of them, found a list");
  CHECK(error_of("k: [1, 20]", p) == "t.yaml:1:8: 'k[1]': expected an integer in [1, 10], found the number 20");
  const Schema l = one_key(Type::list(Type::positive(), 1, 3, "weight"));
  CHECK(checked("k: [1, 2.5]", l)["k"].reals() == std::vector<double>{1, 2.5});
  CHECK(error_of("k: []", l).find("expected at least one weight, found an empty list") != std::string::npos);
  CHECK(error_of("k: [1, 2, 3, 4]", l).find("expected at most 3 weights, found 4") != std::string::npos);
  CHECK(error_of("k: [1, 0]", l) == "t.yaml:1:8: 'k[1]': expected a positive number, found the number 0");
  CHECK(error_of("k: 1", l).find("expected a list of weights, found the number 1") != std::string::npos);
}

TEST_CASE("absent keys take their defaults, in declaration order, marked as not given", "[cpu]") {
  Schema s("section");
  s.key("given", Type::integer(), "written in the file").defaults_to(1);
  s.key("lr", Type::positive(), "a number default").defaults_to(0.01);
  s.key("decay", Type::real(), "a whole number default").defaults_to(1.0);
  s.key("name", Type::string(), "a string default").defaults_to("run");
  s.key("sizes", Type::list(Type::integer()), "a list default").defaults_to(std::vector<int64_t>{64, 1});
  s.key("kernel", Type::int_pair(1, 9), "a pair default").defaults_to(std::pair<int64_t, int64_t>{3, 5});
  s.key("stride", Type::int_pair(1, 9), "a sibling's value").defaults_to_sibling("kernel");
  s.key("empty", Type::string(), "a null value counts as absent").defaults_to("");
  s.key("optional", Type::integer(), "no default: absent stays absent");
  const Value v = checked("given: 3\nempty:\n", s);
  CHECK(to_yaml(v) == "given: 3\nempty: \"\"\nlr: 0.01\ndecay: 1.0\nname: run\nsizes: [64, 1]\nkernel: [3, 5]\n"
                      "stride: [3, 5]\n");
  CHECK(v["given"].given());
  CHECK(!v["lr"].given());
  CHECK(!v.has("optional"));
  CHECK(v["lr"].where().line == 1);  // defaults are located at their map
  CHECK(v["lr"].path() == "lr");
  // A pair of equal values as the sibling default is written as one value.
  CHECK(to_yaml(checked("kernel: [2, 2]\n", s)).find("stride: 2\n") != std::string::npos);
}

TEST_CASE("required keys, nested sections and null sections", "[cpu]") {
  auto inner = std::make_shared<Schema>("inner");
  inner->key("height", Type::integer(1), "required").required();
  inner->key("channels", Type::integer(1), "with a default").defaults_to(1);
  Schema s("outer");
  s.key("input", Type::map(inner), "a section");
  auto opt = std::make_shared<Schema>("opt");
  opt->key("lr", Type::positive(), "").defaults_to(0.1);
  s.key("train", Type::map(opt), "an optional section");
  CHECK(error_of("input: {channels: 1}\n", s) == "t.yaml:1:8: 'input': missing required key 'height'");
  const Value v = checked("input: {height: 2}\ntrain:\n", s);
  CHECK(v["train"]["lr"].real() == 0.1);
  CHECK(to_yaml(checked("input: {height: 2}\n", s)) == "input:\n  height: 2\n  channels: 1\ntrain:\n  lr: 0.1\n");
  CHECK(error_of("input: {height: 2}\ntrain: [1]\n", s) == "t.yaml:2:8: 'train': expected a map, found a list");
}

TEST_CASE("an unknown key names the closest key, a deeper key, or what the map takes", "[cpu]") {
  auto opt = std::make_shared<Schema>("optimizer");
  opt->key("momentum", Type::real(), "").defaults_to(0.9);
  auto train = std::make_shared<Schema>("train");
  train->key("epochs", Type::integer(1), "").defaults_to(1);
  train->key("optimizer", Type::map(opt), "");
  Schema top("top");
  top.key("name", Type::string(), "").required();
  top.key("train", Type::map(train), "");
  CHECK(error_of("name: x\ntrain: {epohcs: 2}\n", top) ==
        "t.yaml:2:9: 'train.epohcs': unknown key 'epohcs', did you mean 'epochs'?");
  CHECK(error_of("name: x\noptimiser: {}\n", top) ==
        "t.yaml:2:1: 'optimiser': unknown key 'optimiser', did you mean 'train.optimizer'?");
  CHECK(error_of("name: x\ntrain: {momentun: 0.5}\n", top).find("did you mean 'train.optimizer.momentum'?") !=
        std::string::npos);
  CHECK(error_of("name: x\nzzzzzz: 1\n", top).find("unknown key 'zzzzzz' (the top level takes name, train)") !=
        std::string::npos);
  CHECK(error_of("name: x\ntrain: {zzzzzz: 1}\n", top).find("unknown key 'zzzzzz' ('train' takes epochs, optimizer)") !=
        std::string::npos);
  // A misspelt required key: say both.
  CHECK(error_of("nmae: x\n", top) ==
        "t.yaml:1:1: 'nmae': missing required key 'name'; found unknown key 'nmae', did you mean 'name'?");
}

TEST_CASE("variants: keys that apply to one type only", "[cpu]") {
  Schema s("optimizer");
  s.key("type", Type::choice({"sgd", "adam"}), "").defaults_to("sgd");
  s.key("lr", Type::positive(), "").defaults_to(0.1);
  s.discriminate_by("type");
  s.variant("sgd", {Key("momentum", Type::real(0, 1), "").defaults_to(0.9)});
  s.variant("adam", {Key("beta1", Type::real(0, 1), "").defaults_to(0.9)});
  CHECK(to_yaml(checked("lr: 0.5\n", s)) == "lr: 0.5\ntype: sgd\nmomentum: 0.9\n");
  CHECK(to_yaml(checked("type: adam\n", s)) == "type: adam\nlr: 0.1\nbeta1: 0.9\n");
  CHECK(error_of("type: sgd\nbeta1: 0.8\n", s) ==
        "t.yaml:2:1: 'beta1': unknown key 'beta1' for optimizer type 'sgd' (it applies to adam; 'sgd' takes type, "
        "lr, momentum)");
  CHECK(error_of("type: adma\n", s).find("expected one of sgd, adam, found 'adma', did you mean 'adam'?") !=
        std::string::npos);
  // A discriminator declared as a string: an unknown variant lists the known ones.
  Schema layer("layer");
  layer.key("type", Type::string(true), "").required();
  layer.discriminate_by("type");
  layer.variant("relu", {});
  layer.variant("conv2d", {Key("filters", Type::integer(1), "").required()});
  CHECK(error_of("type: conv\n", layer) ==
        "t.yaml:1:7: 'type': unknown layer type 'conv', did you mean 'conv2d'? (known types: conv2d, relu)");
}

TEST_CASE("forms are picked by what was written", "[cpu]") {
  auto norm = std::make_shared<Schema>("normalize");
  norm->key("mean", Type::list(Type::real()), "").required();
  Schema s("data");
  s.key("normalize", Type::any_of({Type::choice({"auto"}), Type::map(norm)}).expect("'auto' or a map {mean}"), "")
      .defaults_to("auto");
  s.key("padding", Type::any_of({Type::int_pair(0, 9), Type::choice({"same"})}), "").defaults_to(0);
  CHECK(checked("normalize: {mean: [0.5]}\n", s)["normalize"]["mean"].reals() == std::vector<double>{0.5});
  CHECK(checked("normalize: auto\n", s)["normalize"].string() == "auto");
  CHECK(error_of("normalize: auta\n", s).find("expected 'auto' or a map {mean}, found 'auta', did you mean 'auto'?") !=
        std::string::npos);
  CHECK(error_of("normalize: [1]\n", s).find("expected 'auto' or a map {mean}, found a list") != std::string::npos);
  CHECK(checked("padding: same\n", s)["padding"].string() == "same");
  CHECK(checked("padding: [1, 2]\n", s)["padding"].pair() == std::pair<int64_t, int64_t>{1, 2});
  // A form that takes the value but refuses it says every form accepted; an item keeps its own message.
  CHECK(error_of("padding: 10\n", s).find(
            "expected an integer in [0, 9] or a pair [h, w] of them or one of same, found the number 10") !=
        std::string::npos);
  CHECK(error_of("padding: [1, 10]\n", s) == "t.yaml:1:14: 'padding[1]': expected an integer in [0, 9], found the number 10");
}

TEST_CASE("a default that breaks its own declaration is a programming error", "[cpu]") {
  Schema s("bad");
  s.key("k", Type::integer(1, 3), "").defaults_to(7);
  CHECK_THROWS_WITH(checked("{}", s), Catch::Matchers::Contains("does not satisfy its own declaration"));
  Schema r("bad");
  r.key("x", Type::real(), "").defaults_to(1);  // should be 1.0
  CHECK_THROWS_WITH(checked("{}", r), Catch::Matchers::Contains("declared as an integer"));
}
