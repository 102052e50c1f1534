// The typed model file: defaults from model_spec.h written into the resolved config, one test per
// kind of config error with its exact message and location, overrides, and loading from disk.
// Trap: the model texts start on line 1 right after R"( and kHead is exactly 6 lines long, so
// sections appended to it start on line 7.
#include <string>

#include "config/model_spec.h"
#include "config_test_util.h"
#include "support/catch.h"
#include "support/test_util.h"

using cnn::ConfigError;
using cnn::ModelSpec;
using cnn::test::config_error;
using cnn::test::parse_model;

namespace {

const std::string kHead = R"(name: tiny
input: {channels: 1, height: 8, width: 8}
layers:
  - {name: conv1, type: conv2d, filters: 4, kernel: 3}
  - {name: relu1, type: relu, inputs: conv1}
  - {name: fc, type: dense, units: 3, inputs: [relu1], backend: cpu}
)";

ConfigError model_error(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return config_error([&] { parse_model(text, overrides); });
}

}  // namespace

TEST_CASE("a minimal model parses with the defaults of model_spec.h", "[cpu]") {
  ModelSpec spec = parse_model(kHead);
  CHECK(spec.file == "m.yaml");
  CHECK(spec.name == "tiny");
  CHECK(spec.input.channels == 1);
  CHECK(spec.input.height == 8);
  CHECK(spec.classes.empty());
  REQUIRE(spec.layers.size() == 3);
  CHECK(spec.layers[0].name == "conv1");
  CHECK(spec.layers[0].type == "conv2d");
  CHECK(spec.layers[0].inputs.empty());
  CHECK(spec.layers[0].backend == cnn::LayerSpec{}.backend);
  CHECK(spec.layers[1].inputs == std::vector<std::string>{"conv1"});
  CHECK(spec.layers[2].inputs == std::vector<std::string>{"relu1"});
  CHECK(spec.layers[2].backend == "cpu");
  CHECK(spec.layers[2].index == 2);
  CHECK(spec.layers[2].where.line == 6);
  // The layer's own validated map, where the layer factory reads its attributes.
  CHECK(spec.layers[2].attrs.path() == "layers[2]");
  CHECK(spec.layers[2].attrs["units"].integer() == 3);
  CHECK(spec.layers[0].attrs["filters"].integer() == 4);
  CHECK(spec.layers[0].attrs["stride"].pair() == std::pair<int64_t, int64_t>{1, 1});
  CHECK(!spec.layers[0].attrs["stride"].given());
  CHECK(spec.layers[0].attrs["kernel"].where().line == 4);

  cnn::TrainSpec train;
  CHECK(spec.train.epochs == train.epochs);
  CHECK(spec.train.batch_size == train.batch_size);
  CHECK(spec.train.seed == train.seed);
  CHECK(spec.train.optimizer.type == train.optimizer.type);
  CHECK(spec.train.optimizer.lr == train.optimizer.lr);
  CHECK(spec.train.schedule.type == train.schedule.type);
  CHECK(spec.train.checkpoint.best_metric == train.checkpoint.best_metric);
  CHECK(spec.data.format == cnn::DataSpec{}.format);
  CHECK(spec.data.normalize.automatic);
  CHECK(spec.data.val_split == cnn::DataSpec{}.val_split);
  CHECK(spec.loss.type == "softmax_cross_entropy");
  CHECK(spec.eval.batch_size == cnn::EvalSpec{}.batch_size);
  CHECK(spec.dist.bucket_mb == cnn::DistSpec{}.bucket_mb);
}

TEST_CASE("the resolved tree shows every default and parses back to the same spec", "[cpu]") {
  ModelSpec spec = parse_model(kHead);
  std::string resolved = cnn::to_yaml(spec.config);
  INFO(resolved);
  CHECK(resolved.find("train:\n  epochs: 10\n  batch_size: 64\n") != std::string::npos);
  CHECK(resolved.find("  optimizer:\n    type: sgd\n    lr: 0.01\n    weight_decay: 0.0\n"
                      "    momentum: 0.9\n    nesterov: false\n") != std::string::npos);
  CHECK(resolved.find("beta1") == std::string::npos);  // not a setting of sgd
  CHECK(resolved.find("    random_crop:\n      size: 0\n      padding: 0\n") != std::string::npos);
  CHECK(resolved.find("  - name: conv1\n    type: conv2d\n    filters: 4\n    kernel: 3\n"
                      "    backend: auto\n    algo: auto\n    precision: auto\n    stride: 1\n") != std::string::npos);
  CHECK(resolved.find("train:\n  epochs: 10\n") != std::string::npos);
  CHECK(resolved.find("  early_stopping:\n    metric: val_loss\n    patience: 0\n    min_delta: 0.0\n") !=
        std::string::npos);
  CHECK(resolved.find("dist:\n  bucket_mb: 25.0\n  timeout_s: 300.0\n  compress: none\n") != std::string::npos);
  ModelSpec again = parse_model(resolved);
  CHECK(cnn::to_yaml(again.config) == resolved);
  CHECK(again.train.optimizer.eps == spec.train.optimizer.eps);
  CHECK(again.data.split_seed == spec.data.split_seed);
}

TEST_CASE("every section is read into the spec", "[cpu]") {
  ModelSpec spec = parse_model(kHead + R"(classes: [a, b, c]
loss: {label_smoothing: 0.1, class_weights: [1, 2, 0.5]}
data:
  format: fer2013-csv
  path: x.csv
  normalize: {mean: [0.5], std: [0.25]}
  augment: {random_crop: {size: 6, padding: 1}, hflip: true, rotate: 10, brightness: 0.2, contrast: 0.1}
  val_split: 0.2
  on_bad_row: skip
  color: gray
train:
  epochs: 3
  seed: 18446744073709551615
  optimizer: {type: adamw, lr: 0.001, beta2: 0.98, weight_decay: 0.05}
  schedule: {type: multistep, milestones: [2, 5], gamma: 0.5, warmup_epochs: 1}
  checkpoint: {keep_last: 0, best_metric: val_loss}
eval: {ten_crop: true, batch_size: 32}
dist: {compress: bf16, sync_batchnorm: true}
)");
  CHECK(spec.classes == std::vector<std::string>{"a", "b", "c"});
  CHECK(spec.loss.label_smoothing == 0.1);
  CHECK(spec.loss.class_weights == "list");
  CHECK(spec.loss.class_weight_values == std::vector<double>{1, 2, 0.5});
  CHECK(spec.data.format == "fer2013-csv");
  CHECK(spec.data.path == "x.csv");
  CHECK(!spec.data.normalize.automatic);
  CHECK(spec.data.normalize.std == std::vector<double>{0.25});
  CHECK(spec.data.augment.crop_size == 6);
  CHECK(spec.data.augment.crop_padding == 1);
  CHECK(spec.data.augment.hflip);
  CHECK(spec.data.augment.rotate == 10.0);
  CHECK(spec.data.augment.contrast == 0.1);
  CHECK(spec.data.val_split == 0.2);
  CHECK(spec.data.on_bad_row == "skip");
  CHECK(spec.data.color == "gray");
  CHECK(spec.train.epochs == 3);
  CHECK(spec.train.seed == 18446744073709551615ULL);
  CHECK(spec.train.optimizer.type == "adamw");
  CHECK(spec.train.optimizer.beta2 == 0.98);
  CHECK(spec.train.optimizer.weight_decay == 0.05);
  CHECK(spec.train.schedule.milestones == std::vector<int64_t>{2, 5});
  CHECK(spec.train.schedule.gamma == 0.5);
  CHECK(spec.train.schedule.warmup_epochs == 1.0);
  CHECK(spec.train.checkpoint.keep_last == 0);
  CHECK(spec.train.checkpoint.best_metric == "val_loss");
  CHECK(spec.eval.ten_crop);
  CHECK(spec.eval.batch_size == 32);
  CHECK(spec.dist.compress == "bf16");
  CHECK(spec.dist.sync_batchnorm);
}

TEST_CASE("an unknown key in a section names the file, line, column and the known key", "[cpu]") {
  ConfigError e = model_error(kHead + "train:\n  epochs: 3\n  bacth_size: 8\n");
  CHECK(std::string(e.what()) == "m.yaml:9:3: 'train.bacth_size': unknown key 'bacth_size', did you mean 'batch_size'?");
  ConfigError nested = model_error(kHead + "data:\n  augment: {random_crop: {sise: 4}}\n");
  CHECK(std::string(nested.what()) ==
        "m.yaml:8:27: 'data.augment.random_crop.sise': unknown key 'sise', did you mean 'size'?");
}

TEST_CASE("an unknown top-level key suggests a section or a key of a section", "[cpu]") {
  ConfigError e = model_error(kHead + "optimiser: {type: sgd}\n");
  CHECK(std::string(e.what()) == "m.yaml:7:1: 'optimiser': unknown key 'optimiser', did you mean 'train.optimizer'?");
  ConfigError layer = model_error("name: x\ninput: {height: 2, width: 2}\nlayer: []\n");
  CHECK(layer.message() == "missing required key 'layers'; found unknown key 'layer', did you mean 'layers'?");
  CHECK(model_error(kHead + "zzzzzz: 1\n").message() ==
        "unknown key 'zzzzzz' (the top level takes name, input, classes, layers, loss, data, train, eval, dist)");
}

TEST_CASE("a key of another optimizer or schedule type is rejected with the types that use it", "[cpu]") {
  ConfigError e = model_error(kHead + "train:\n  optimizer: {type: sgd, lr: 0.1, beta1: 0.8}\n");
  CHECK(std::string(e.what()) ==
        "m.yaml:8:35: 'train.optimizer.beta1': unknown key 'beta1' for optimizer type 'sgd' (it applies to adam, "
        "adamw; 'sgd' takes type, lr, weight_decay, momentum, nesterov)");
  ConfigError s = model_error(kHead + "train:\n  schedule: {type: cosine, gamma: 0.5}\n");
  CHECK(s.message() ==
        "unknown key 'gamma' for schedule type 'cosine' (it applies to exponential, multistep, step; 'cosine' "
        "takes type, warmup_epochs, warmup_start_factor, min_lr)");
  ConfigError typo = model_error(kHead + "train:\n  optimizer: {type: sgd, momentun: 0.8}\n");
  CHECK(typo.message() == "unknown key 'momentun', did you mean 'momentum'?");
}

TEST_CASE("a string where an integer is expected is a type error at the value", "[cpu]") {
  ConfigError e = model_error(kHead + "train:\n  epochs: many\n");
  CHECK(std::string(e.what()) == "m.yaml:8:11: 'train.epochs': expected an integer in [1, 1000000], found the string 'many'");
  ConfigError quoted = model_error(kHead + "train:\n  epochs: \"3\"\n");
  CHECK(quoted.message() == "expected an integer in [1, 1000000], found the string '3'");
}

TEST_CASE("a list where a map is expected is a type error at the list", "[cpu]") {
  ConfigError e = model_error("name: x\ninput: [1, 8, 8]\nlayers: [{name: a, type: relu}]\n");
  CHECK(std::string(e.what()) == "m.yaml:2:8: 'input': expected a map {channels, height, width}, found a list");
  ConfigError section = model_error(kHead + "train: [1]\n");
  CHECK(section.message() == "expected a map, found a list");
  ConfigError layer = model_error("name: x\ninput: {height: 2, width: 2}\nlayers: [relu]\n");
  CHECK(std::string(layer.what()) ==
        "m.yaml:3:10: 'layers[0]': expected a layer map {name: ..., type: ...}, found the string 'relu'");
}

TEST_CASE("a model without a required key is an error at the map that lacks it", "[cpu]") {
  ConfigError e = model_error("name: x\ninput: {channels: 1, width: 8}\nlayers: [{name: a, type: relu}]\n");
  CHECK(std::string(e.what()) == "m.yaml:2:8: 'input': missing required key 'height'");
  ConfigError top = model_error("name: x\ninput: {height: 2, width: 2}\n");
  CHECK(std::string(top.what()) == "m.yaml:1:1: missing required key 'layers'");
  ConfigError type = model_error("name: x\ninput: {height: 2, width: 2}\nlayers:\n  - name: a\n");
  CHECK(std::string(type.what()) == "m.yaml:4:5: 'layers[0]': missing required key 'type'");
  ConfigError empty = model_error("name: x\ninput: {height: 2, width: 2}\nlayers: []\n");
  CHECK(empty.message() == "expected at least one layer, found an empty list");
  CHECK(model_error("").message() == "expected a model description (a map with name, input, layers, ...), found nothing");
}

TEST_CASE("a bad choice lists the choices and suggests the closest", "[cpu]") {
  ConfigError e = model_error(kHead + "train:\n  optimizer: {type: adma}\n");
  CHECK(std::string(e.what()) ==
        "m.yaml:8:21: 'train.optimizer.type': expected one of sgd, adam, adamw, rmsprop, found 'adma', did you "
        "mean 'adam'?");
  ConfigError b = model_error(kHead + "data: {format: fer2013}\n");
  CHECK(b.message() == "expected one of fer2013-csv, image-folder, idx, synthetic, found 'fer2013', did you mean "
                       "'fer2013-csv'?");
}

TEST_CASE("a duplicate layer name points at the second and names the first's line", "[cpu]") {
  ConfigError e = model_error(R"(name: x
input: {height: 2, width: 2}
layers:
  - {name: a, type: relu}
  - {name: b, type: relu}
  - {name: a, type: relu}
)");
  CHECK(std::string(e.what()) ==
        "m.yaml:6:12: 'layers[2].name': duplicate layer name 'a': layers[0] at line 4 has it already");
  ConfigError dotted = model_error("name: x\ninput: {height: 2, width: 2}\nlayers: [{name: a.b, type: relu}]\n");
  CHECK(dotted.message() == "expected a layer name of letters, digits, '_' and '-', found the string 'a.b'");
}

TEST_CASE("a duplicate key and a YAML syntax error in a model file are located", "[cpu]") {
  ConfigError dup = model_error(kHead + "train:\n  epochs: 1\n  epochs: 2\n");
  CHECK(std::string(dup.what()) ==
        "m.yaml:9:3: 'train.epochs': duplicate key 'epochs' (first written at line 8, column 3)");
  ConfigError syntax = model_error(kHead + "train: {epochs: 1\n");
  CHECK(syntax.where().file == "m.yaml");
  CHECK(syntax.where().line >= 7);
  CHECK(syntax.message().rfind("YAML syntax error: ", 0) == 0);
}

TEST_CASE("an out-of-range value names the value found", "[cpu]") {
  ConfigError batch = model_error(kHead + "train:\n  batch_size: 0\n");
  CHECK(std::string(batch.what()) == "m.yaml:8:15: 'train.batch_size': expected an integer in [1, 1048576], found the number 0");
  CHECK(model_error(kHead + "train:\n  optimizer: {lr: -0.1}\n").message() ==
        "expected a positive number, found the number -0.1");
  CHECK(model_error(kHead + "loss: {label_smoothing: 1.0}\n").message() ==
        "expected a number in [0, 1), found the number 1.0");
  CHECK(model_error("name: x\ninput: {height: 0, width: 2}\nlayers: [{name: a, type: relu}]\n").message() ==
        "expected an integer in [1, 1048576], found the number 0");
  CHECK(model_error(kHead + "data: {augment: {random_crop: {size: 11}}}\n").message() ==
        "expected a crop size <= 8 (the input plus twice the padding), found the number 11");
  CHECK(model_error(kHead + "train:\n  schedule: {type: multistep, milestones: [5, 3]}\n").message() ==
        "expected an increasing epoch >= 6, found the number 3");
  CHECK(model_error(kHead + "data: {normalize: {mean: [0.5, 0.5], std: [1]}}\n").message() ==
        "expected 1 values (one per input channel), found 2");
  CHECK(model_error(kHead + "classes: [a, b]\nloss: {class_weights: [1, 2, 3]}\n").message() ==
        "expected one weight per class (2 classes), found 3 weights");
}

TEST_CASE("overrides apply in order before parsing, by path, index and layer name", "[cpu]") {
  ModelSpec spec = parse_model(kHead,
                                    {"train.optimizer.lr=0.05", "train.optimizer.lr=0.02", "layers.conv1.filters=8",
                                     "layers[1].backend=cuda", "layers.2.inputs=[conv1, relu1]",
                                     "data.normalize={mean: [0.1], std: [0.2]}"});
  CHECK(spec.train.optimizer.lr == 0.02);
  CHECK(spec.layers[0].attrs["filters"].integer() == 8);
  CHECK(spec.layers[0].attrs["filters"].where().file == "<--set>");
  CHECK(spec.layers[1].backend == "cuda");
  CHECK(spec.layers[2].inputs == std::vector<std::string>{"conv1", "relu1"});
  CHECK(spec.data.normalize.mean == std::vector<double>{0.1});
}

TEST_CASE("a bad override of a model names <--set> and the assignment", "[cpu]") {
  ConfigError e = model_error(kHead, {"train.epochs"});
  CHECK(e.where().file == "<--set>");
  CHECK(e.message() == "malformed override 'train.epochs': expected KEY=VALUE, e.g. train.optimizer.lr=0.05");
  ConfigError name = model_error(kHead, {"layers.conv9.filters=3"});
  CHECK(std::string(name.what()) ==
        "<--set>: 'layers.conv9.filters': 'layers' has no item named 'conv9', did you mean 'conv1'? "
        "(in --set layers.conv9.filters=3)");
  ConfigError value = model_error(kHead, {"train.batch_size=-4"});
  CHECK(std::string(value.what()) == "<--set>: 'train.batch_size': expected an integer in [1, 1048576], found the number -4");
  ConfigError unknown = model_error(kHead, {"train.optimizer.momentun=0.5"});
  CHECK(std::string(unknown.what()) ==
        "<--set>: 'train.optimizer.momentun': unknown key 'momentun', did you mean 'momentum'?");
}

TEST_CASE("load_model_spec reads a file, applies overrides and names a missing file", "[cpu]") {
  cnn::test::TempDir dir;
  std::string path = (dir / "m.yaml").string();
  cnn::test::write_text_file(path, kHead + "train: {epochs: 2}\n");
  ModelSpec spec = cnn::load_model_spec(path, {"train.epochs=5"}, cnn::test::test_layers());
  CHECK(spec.file == path);
  CHECK(spec.train.epochs == 5);
  CHECK(spec.layers[1].where.file == path);
  ConfigError bad = config_error([&] { cnn::load_model_spec(path, {"train.epochs=0"}, cnn::test::test_layers()); });
  CHECK(bad.message() == "expected an integer in [1, 1000000], found the number 0");
  std::string missing = (dir / "missing.yaml").string();
  ConfigError e = config_error([&] { cnn::load_model_spec(missing, {}, cnn::test::test_layers()); });
  CHECK(e.where().file == missing);
  CHECK(std::string(e.what()).find(missing) != std::string::npos);
}

TEST_CASE("train.precision takes fp32 (the default), tf32, bf16 or fp16, reaches every layer unless it has its own, "
          "and refuses anything else naming them", "[cpu]") {
  ModelSpec plain = parse_model(kHead);
  CHECK(plain.train.precision == "fp32");
  CHECK(plain.config["train"]["precision"].string() == "fp32");  // the resolved config records the default
  for (const cnn::LayerSpec& l : plain.layers) CHECK(l.precision == "fp32");
  ModelSpec tf32 = parse_model(kHead + "train: {precision: tf32}\n");
  CHECK(tf32.train.precision == "tf32");
  for (const cnn::LayerSpec& l : tf32.layers) CHECK(l.precision == "tf32");
  CHECK(parse_model(kHead, {"train.precision=tf32"}).train.precision == "tf32");
  ModelSpec bf16 = parse_model(kHead, {"train.precision=bf16"});
  for (const cnn::LayerSpec& l : bf16.layers) CHECK(l.precision == "bf16");
  ModelSpec own = parse_model(kHead, {"train.precision=bf16", "layers." + bf16.layers[0].name + ".precision=fp32"});
  CHECK(own.layers[0].own_precision == "fp32");
  CHECK(own.layers[0].precision == "fp32");
  CHECK(own.layers[1].precision == "bf16");
  ModelSpec fp16 = parse_model(kHead + "train: {precision: fp16}\n");
  for (const cnn::LayerSpec& l : fp16.layers) CHECK(l.precision == "fp16");
  ModelSpec own16 = parse_model(kHead, {"layers." + bf16.layers[0].name + ".precision=fp16"});
  CHECK(own16.layers[0].precision == "fp16");
  CHECK(own16.layers[1].precision == "fp32");
  for (const std::string bad : {"fp8", "TF32", "half"}) {
    const ConfigError e = model_error(kHead + "train: {precision: " + bad + "}\n");
    INFO(e.what());
    CHECK(e.message().rfind("expected one of fp32, tf32, bf16, fp16, found '" + bad + "'", 0) == 0);
    CHECK(std::string(e.what()).rfind("m.yaml:7:", 0) == 0);
  }
}

TEST_CASE("train.autotune without a model file takes the model file's defaults and checks the same way", "[cpu]") {
  using cnn::AutotuneSpec;
  using cnn::parse_autotune_overrides;
  // Nothing given: exactly what a model file without train.autotune resolves to.
  const AutotuneSpec from_model = parse_model(kHead).train.autotune;
  const AutotuneSpec none = parse_autotune_overrides({});
  CHECK(none.cache == from_model.cache);
  CHECK(none.workspace_mb == from_model.workspace_mb);
  CHECK(none.tolerance == from_model.tolerance);
  // Given keys, each the same as through a model file's --set.
  const std::vector<std::string> sets{"train.autotune.workspace_mb=64", "train.autotune.tolerance=2.5e-3",
                                      "train.autotune.cache=none"};
  const AutotuneSpec given = parse_autotune_overrides(sets);
  const AutotuneSpec given_model = parse_model(kHead, sets).train.autotune;
  CHECK(given.workspace_mb == 64);
  CHECK(given.workspace_mb == given_model.workspace_mb);
  CHECK(given.tolerance == 2.5e-3);
  CHECK(given.cache == "none");
  // The declarations' ranges and the unknown-key check hold here too.
  const std::string too_big =
      config_error([] { parse_autotune_overrides({"train.autotune.workspace_mb=2000000"}); }).what();
  CHECK(too_big.find("'train.autotune.workspace_mb'") != std::string::npos);
  CHECK_THROWS_AS(parse_autotune_overrides({"train.autotune.tolerance=-1"}), ConfigError);
  CHECK_THROWS_AS(parse_autotune_overrides({"train.autotune.nonsense=1"}), ConfigError);
  CHECK_THROWS_AS(parse_autotune_overrides({"train.epochs=3"}), ConfigError);
}
