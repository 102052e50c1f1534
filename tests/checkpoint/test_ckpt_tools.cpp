// inspect / verify / diff of checkpoints (lib/checkpoint/ckpt_tools) on checkpoints written here,
// in-process, and then edited byte by byte or tensor by tensor.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <set>

#include "checkpoint/checksum.h"
#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "graph/executor.h"
#include "graph/graph.h"
#include "optim/schedule.h"
#include "support/catch.h"
#include "support/param_segments.h"
#include "support/test_util.h"
#include "checkpoint/checkpoint_state.h"
#include "checkpoint/ckpt_tools.h"

using namespace cnn;
using Catch::Matchers::Contains;

namespace {

const char* kModel = R"(name: unit
input: {channels: 1, height: 6, width: 6}
classes: [a, b, c, d]
layers:
  - {name: conv1, type: conv2d, filters: 2, kernel: 3}
  - {name: bn1, type: batchnorm}
  - {name: fc, type: dense, units: 4}
loss: {type: softmax_cross_entropy}
data: {format: synthetic}
train: {epochs: 3, batch_size: 4, seed: 7, optimizer: {type: adam, lr: 0.01}}
)";

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

// A checkpoint of kModel mid-way through epoch 2, with fc.bias = `fc_bias`.
std::string write_unit_checkpoint(const test::TempDir& dir, const std::string& name, bool with_optimizer = true,
                                  std::vector<float> fc_bias = {1, 3, kNaN, kInf}) {
  ModelSpec spec = parse_model_text(kModel, "unit.yaml");
  auto graph = Graph::build(spec);
  Executor ex(*graph, 4, ExecContext::cpu(0));
  ex.init_params(1);
  for (size_t i = 0; i < graph->params().size(); ++i)
    if (graph->params()[i].name == "fc.bias") ex.param(int(i)).copy_from(Tensor::from_vector(Shape{4}, fc_bias));
  const std::vector<ParamSegment> segs = test::trainable_segments(*graph);
  auto opt = make_optimizer(spec.train.optimizer, segs, graph->params_size());
  opt->set_step_count(5);
  CheckpointMeta meta;
  meta.config_yaml = to_yaml(spec.config);
  meta.epoch = 1;
  meta.next_batch = 2;
  meta.step = 5;
  meta.schedule = LrSchedule(spec.train.schedule, 0.01, 3, 3).state();
  meta.seed = 7;
  meta.dataset_fingerprint = "train=9:abc";
  meta.metrics = {{"event", "epoch"}, {"epoch", 1}, {"val_acc", 0.5}};
  meta.has_best = true;
  meta.best_metric = 0.5;
  meta.epoch_progress = {{"loss_sum", 2.5}, {"correct", 3.0}, {"seen", 8}};
  std::string path = (dir / name).string();
  write_checkpoint(path, ex, with_optimizer ? opt.get() : nullptr, meta);
  return path;
}

struct Edit {
  std::function<void(std::map<std::string, std::string>&)> metadata;  // checksums are recomputed after
  std::set<std::string> drop;
  std::map<std::string, std::vector<float>> replace;  // F32 tensors, same numel
  std::map<std::string, std::vector<float>> add;      // new 1-D F32 tensors
};

// A copy of `src` with tensors dropped, replaced or added and the metadata edited.
std::string rewrite(const std::string& src, const std::string& dst, const Edit& e) {
  SafetensorsFile f = SafetensorsFile::open(src);
  SafetensorsWriter w;
  for (const TensorInfo& t : f.tensors()) {
    if (e.drop.count(t.name)) continue;
    if (e.replace.count(t.name))
      w.add_f32(t.name, t.shape, e.replace.at(t.name).data());
    else
      w.add(t.name, t.dtype, t.shape, f.data(t.name), t.bytes());
  }
  for (const auto& [name, v] : e.add) w.add_f32(name, {int64_t(v.size())}, v.data());
  std::map<std::string, std::string> meta;
  for (const auto& [k, v] : f.metadata())
    if (k.rfind(kChecksumKeyPrefix, 0) != 0) meta[k] = v;
  if (e.metadata) e.metadata(meta);
  for (const auto& [k, v] : meta) w.set_metadata(k, v);
  add_checksums(w);
  w.write_atomic(dst);
  return dst;
}

void replace_in(std::string& text, const std::string& from, const std::string& to) {
  size_t at = text.find(from);
  REQUIRE(at != std::string::npos);
  text.replace(at, from.size(), to);
}

const TensorStats& stats(const InspectReport& r, const std::string& name) {
  for (const TensorStats& t : r.tensors)
    if (t.name == name) return t;
  FAIL("no tensor " << name);
  throw 0;
}

}  // namespace

TEST_CASE("inspect reports the training position and exact statistics of every tensor", "[cpu]") {
  test::TempDir dir;
  std::string path = write_unit_checkpoint(dir, "a.safetensors");
  InspectReport r = inspect_checkpoint(path);
  CHECK(r.summary["model"] == "unit");
  CHECK(r.summary["format"] == "cnn-train-checkpoint");
  CHECK(r.summary["format_version"] == 1);
  CHECK(r.summary["epoch"] == 1);
  CHECK(r.summary["next_batch"] == 2);
  CHECK(r.summary["step"] == 5);
  CHECK(r.summary["optimizer_steps"] == 5);
  CHECK(r.summary["seed"] == 7);
  CHECK(r.summary["world_size"] == 1);
  CHECK(r.summary["dataset_fingerprint"] == "train=9:abc");
  CHECK(r.summary["best_metric"] == 0.5);
  CHECK(r.summary["schedule"]["type"] == "constant");
  CHECK(r.summary["epoch_progress"]["seen"] == 8);
  CHECK(r.checksum_problem.empty());
  CHECK(r.checksums_matched == r.tensors.size());

  // fc.bias = {1, 3, NaN, Inf}: statistics over the finite values 1 and 3.
  const TensorStats& b = stats(r, "fc.bias");
  CHECK(b.has_stats);
  CHECK(b.min == 1.0);
  CHECK(b.max == 3.0);
  CHECK(b.mean == 2.0);
  CHECK(b.std == 1.0);
  CHECK(b.nan == 1);
  CHECK(b.inf == 1);
  CHECK(stats(r, "conv1.weight").shape == std::vector<int64_t>{2, 1, 3, 3});
  CHECK(stats(r, "optim.conv1.weight.exp_avg_sq").dtype == "F32");

  std::string text = to_text(r);
  CHECK_THAT(text, Contains("model:         unit"));
  CHECK_THAT(text, Contains("epoch 2 of 3 in progress, next batch 2 (data cursor)"));
  CHECK_THAT(text, Contains("best metric:   val_acc 0.5"));
  CHECK_THAT(text, Contains("[2, 1, 3, 3]"));
  CHECK_THAT(text, Contains("1/1"));  // fc.bias NaN/Inf
  nlohmann::json j = nlohmann::json::parse(to_json(r).dump());
  bool seen = false;
  for (const auto& t : j["tensors"])
    if (t["name"] == "fc.bias") {
      seen = true;
      CHECK(t["std"] == 1.0);
      CHECK(t["nan"] == 1);
    }
  CHECK(seen);
}

TEST_CASE("inspect reads any safetensors file and shows n/a statistics for integer tensors", "[cpu]") {
  test::TempDir dir;
  SafetensorsWriter w;
  std::vector<int32_t> ints{1, 2, 3};
  std::vector<float> floats{kNaN, kNaN};
  w.add("ids", DType::i32, {3}, ints.data(), 12);
  w.add_f32("all_nan", {2}, floats.data());
  w.set_metadata("producer", "elsewhere");
  std::string path = (dir / "plain.safetensors").string();
  w.write_atomic(path);
  InspectReport r = inspect_checkpoint(path);
  CHECK(r.other_metadata["producer"] == "elsewhere");
  CHECK(!stats(r, "ids").is_float);
  CHECK(!stats(r, "all_nan").has_stats);
  CHECK(stats(r, "all_nan").nan == 2);
  std::string text = to_text(r);
  CHECK_THAT(text, Contains("not a cnn-train checkpoint"));
  CHECK_THAT(text, Contains("n/a"));
  CHECK_THAT(text, Contains("producer:"));
  CHECK(to_json(r)["tensors"][0]["min"].is_null());
}

TEST_CASE("verify accepts a fresh checkpoint and names every check it made", "[cpu]") {
  test::TempDir dir;
  VerifyReport r = verify_checkpoint(write_unit_checkpoint(dir, "a.safetensors"));
  INFO(to_text(r));
  CHECK(r.ok());
  std::vector<std::string> names;
  for (const auto& c : r.checks) {
    names.push_back(c.name);
    CHECK(c.ok);
  }
  CHECK(names ==
        std::vector<std::string>{"header", "metadata", "checksums", "config", "position", "parameters", "optimizer"});
  CHECK_THAT(to_text(r), Contains("\nvalid\n"));
  CHECK(to_json(r)["valid"] == true);
}

TEST_CASE("verify and the readers name a few tensors of a list and count the rest, however many there are", "[cpu]") {
  // A file of 100000 zero-size tensors made verify print every name: a 700 KB line.
  test::TempDir dir;
  SafetensorsFile f = SafetensorsFile::open(write_unit_checkpoint(dir, "a.safetensors"));
  SafetensorsWriter w;
  for (const TensorInfo& t : f.tensors()) w.add(t.name, t.dtype, t.shape, f.data(t.name), t.bytes());
  for (int i = 0; i < 1000; ++i) w.add(fmt::format("extra{:04}", i), DType::f32, {0}, nullptr, 0);
  for (const auto& [k, v] : f.metadata())
    if (k.rfind(kChecksumKeyPrefix, 0) != 0) w.set_metadata(k, v);
  const std::string path = (dir / "unchecked.safetensors").string();
  w.write_atomic(path);
  const size_t n = f.tensors().size() + 1000;
  VerifyReport r = verify_checkpoint(path);
  INFO(to_text(r));
  const auto problem = std::find_if(r.problems.begin(), r.problems.end(),
                                    [](const std::string& p) { return p.rfind("checksums: ", 0) == 0; });
  REQUIRE(problem != r.problems.end());
  CHECK(*problem == fmt::format("checksums: no checksum for {} of {} tensors ({}, {}, {} and {} more)", n, n,
                                f.tensors()[0].name, f.tensors()[1].name, f.tensors()[2].name, n - 3));
  // The tensors the model does not have: as many as the file holds, listed up to kNamesShown.
  CHECK(std::find(r.problems.begin(), r.problems.end(),
                  "parameters: unexpected: extra0000, extra0001, extra0002, extra0003, extra0004, extra0005, "
                  "extra0006, extra0007, extra0008, extra0009 and 990 more") != r.problems.end());
  CHECK(to_text(r).size() < 4000);
  try {
    read_checkpoint(path);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).size() < 1000);
  }
}

TEST_CASE("verify lists every way a checkpoint does not fit its config, first problem first", "[cpu]") {
  test::TempDir dir;
  std::string good = write_unit_checkpoint(dir, "good.safetensors");
  std::string bad = (dir / "bad.safetensors").string();
  auto verify_edit = [&](const Edit& e) { return verify_checkpoint(rewrite(good, bad, e)); };
  auto has = [](const VerifyReport& r, const std::string& phrase) {
    for (const auto& p : r.problems)
      if (p.find(phrase) != std::string::npos) return true;
    return false;
  };
  SECTION("the config's conv layer is wider than the file's") {
    Edit e;
    e.metadata = [](auto& m) { replace_in(m["config"], "filters: 2", "filters: 3"); };
    VerifyReport r = verify_edit(e);
    CHECK(!r.ok());
    CHECK_THAT(r.problems.front(),
               Contains("parameters: mismatched: conv1.weight (file F32 [2, 1, 3, 3], model F32 [3, 1, 3, 3])"));
    CHECK_THAT(r.problems.front(), Contains("fc.weight (file F32 [4, 32], model F32 [4, 48])"));
    CHECK(has(r, "optimizer: mismatched: optim.conv1.weight.exp_avg"));
  }
  SECTION("a missing buffer and an unexpected tensor") {
    Edit e;
    e.drop = {"bn1.running_mean"};
    e.add = {{"extra.weight", {1.0f}}};
    VerifyReport r = verify_edit(e);
    CHECK(has(r, "parameters: missing: bn1.running_mean"));
    CHECK(has(r, "parameters: unexpected: extra.weight"));
  }
  SECTION("optimizer slots absent or foreign") {
    Edit e;
    e.drop = {"optim.fc.bias.exp_avg_sq"};
    e.add = {{"optim.fc.bias.momentum_buffer", {1, 2, 3, 4}}};
    VerifyReport r = verify_edit(e);
    CHECK(has(r, "optimizer: missing for adam: optim.fc.bias.exp_avg_sq"));
    CHECK(has(r, "not slots of adam: optim.fc.bias.momentum_buffer"));
    CHECK(!verify_checkpoint(write_unit_checkpoint(dir, "weights_only.safetensors", false)).ok());
  }
  SECTION("another format version") {
    Edit e;
    e.metadata = [](auto& m) { m["format_version"] = "2"; };
    VerifyReport r = verify_edit(e);
    CHECK_THAT(r.problems.front(), Contains("metadata: checkpoint '" + bad + "' has format version 2"));
    CHECK(r.checks.size() == 3);  // header, metadata, checksums; nothing that needs the metadata
  }
  SECTION("a config that does not build a model") {
    Edit e;
    e.metadata = [](auto& m) { replace_in(m["config"], "type: dense", "type: densse"); };
    VerifyReport r = verify_edit(e);
    CHECK_THAT(r.problems.front(), Contains("config:"));
    CHECK_THAT(r.problems.front(), Contains("densse"));
  }
  SECTION("a position beyond the configured epochs") {
    Edit e;
    e.metadata = [](auto& m) { m["epoch"] = "9"; };
    CHECK_THAT(verify_edit(e).problems.front(),
               Contains("position: epoch 9 (next batch 2) is beyond train.epochs = 3"));
  }
  SECTION("a flipped data byte names the tensor") {
    std::string bytes = test::read_text_file(good);
    bytes[bytes.size() - 1] ^= 1;
    test::write_text_file(bad, bytes);
    VerifyReport r = verify_checkpoint(bad);
    std::string last = SafetensorsFile::open(good).tensors().back().name;
    CHECK_THAT(r.problems.front(), Contains("checksums: tensor '" + last + "'"));
    CHECK(r.problems.size() == 1);
  }
  SECTION("a truncated file stops at the header") {
    std::string bytes = test::read_text_file(good);
    test::write_text_file(bad, bytes.substr(0, bytes.size() - 10));
    VerifyReport r = verify_checkpoint(bad);
    CHECK(r.checks.size() == 1);
    CHECK_THAT(r.problems.front(), Contains("header:"));
    CHECK_THAT(to_text(r), Contains("invalid: header:"));
    CHECK(to_json(r)["problems"].size() == 1);
  }
}

TEST_CASE("diff reports config changes, max differences and tensors in one file only", "[cpu]") {
  test::TempDir dir;
  std::string a = write_unit_checkpoint(dir, "a.safetensors", true, {1, 2, 0, -4});
  Edit e;
  e.replace = {{"fc.bias", {1, 2.5f, 0, -3}}};
  e.drop = {"bn1.running_var"};
  e.add = {{"new.tensor", {0}}};
  e.metadata = [](auto& m) {
    replace_in(m["config"], "epochs: 3", "epochs: 5");
    m["step"] = "6";
  };
  std::string b = rewrite(a, (dir / "b.safetensors").string(), e);
  DiffReport r = diff_checkpoints(a, b);
  REQUIRE(r.config.size() == 1);
  CHECK(r.config[0].key == "train.epochs");
  CHECK(r.config[0].before == "3");
  CHECK(r.config[0].after == "5");
  REQUIRE(r.metadata.size() == 1);
  CHECK(r.metadata[0].key == "step");
  CHECK(r.only_a == std::vector<std::string>{"bn1.running_var"});
  CHECK(r.only_b == std::vector<std::string>{"new.tensor"});
  CHECK(!r.identical());
  for (const TensorDiff& t : r.tensors) {
    INFO(t.name);
    if (t.name == "fc.bias") {
      CHECK(!t.identical);
      CHECK(t.max_abs == 1.0);
      CHECK(t.max_rel == 0.25);  // |-4 - -3| / 4 beats 0.5 / 2.5
    } else {
      CHECK(t.identical);
      CHECK(t.max_abs == 0.0);
    }
  }
  std::string text = to_text(r);
  CHECK_THAT(text, Contains("train.epochs: 3 -> 5"));
  CHECK_THAT(text, Contains("only in a: bn1.running_var"));
  CHECK_THAT(text, Contains("only in b: new.tensor"));
  nlohmann::json j = to_json(r);
  CHECK(j["identical"] == false);
  CHECK(j["only_b"][0] == "new.tensor");

  CHECK(diff_checkpoints(a, a).identical());
  Edit nan;
  nan.replace = {{"fc.bias", {1, 2, kNaN, -4}}};
  DiffReport rn = diff_checkpoints(a, rewrite(a, (dir / "c.safetensors").string(), nan));
  for (const TensorDiff& t : rn.tensors)
    if (t.name == "fc.bias") CHECK(std::isinf(t.max_abs));
  CHECK(to_json(rn).dump().find("\"max_abs\":null") != std::string::npos);
}

TEST_CASE("checkpoint metadata is parsed strictly and checked against its config at the limits", "[cpu]") {
  test::TempDir dir;
  const std::string path = write_unit_checkpoint(dir, "a.safetensors");  // epoch 2 of 3 in progress, batch 4
  const std::map<std::string, std::string> good = SafetensorsFile::open(path).metadata();
  const ModelSpec spec = parse_model_text(good.at("config"), "unit (config)");
  auto with = [&](std::map<std::string, std::string> changes) {
    std::map<std::string, std::string> m = good;
    for (auto& [k, v] : changes) m[k] = v;
    return m;
  };
  auto problems = [&](std::map<std::string, std::string> changes) {
    std::vector<std::string> p = metadata_problems(parse_checkpoint_meta(with(changes), "ckpt"), spec);
    std::string all;
    for (const auto& x : p) all += x + "\n";
    return all;
  };
  CHECK(problems({}) == "");
  CHECK(problems({{"world_size", "1048576"}, {"elapsed_s", "1e9"}}) == "");
  CHECK_THROWS_WITH(parse_checkpoint_meta(with({{"world_size", "1048577"}}), "ckpt"),
                    Contains("'world_size' is 1048577, outside [1, 1048576]"));
  CHECK_THROWS_WITH(parse_checkpoint_meta(with({{"world_size", "0"}}), "ckpt"), Contains("outside [1, 1048576]"));
  CHECK_THROWS_WITH(parse_checkpoint_meta(with({{"epoch", "+1"}}), "ckpt"), Contains("expected an integer"));
  CHECK_THROWS_WITH(parse_checkpoint_meta(with({{"step", "0x5"}}), "ckpt"), Contains("expected an integer"));
  CHECK_THROWS_WITH(parse_checkpoint_meta(with({{"elapsed_s", "inf"}}), "ckpt"), Contains("expected a finite number"));
  CHECK_THROWS_WITH(parse_checkpoint_meta(with({{"elapsed_s", "1.5e9"}}), "ckpt"), Contains("outside [0, 1000000000]"));
  CHECK_THROWS_WITH(parse_checkpoint_meta(with({{"metrics", "[1]"}}), "ckpt"),
                    Contains("metadata 'metrics' is a JSON array, expected an object"));
  CHECK_THROWS_WITH(parse_checkpoint_meta(with({{"epoch_progress", R"({"loss_sum":-1})"}}), "ckpt"),
                    Contains("'epoch_progress.loss_sum' is -1, expected a finite number >= 0"));
  CHECK_THROWS_WITH(parse_checkpoint_meta(with({{"schedule", R"({"type":1})"}}), "ckpt"),
                    Contains("'schedule.type' is 1, expected a string"));
  CHECK_THROWS_WITH(parse_checkpoint_meta(with({{"format_version", "1 "}}), "ckpt"), Contains("format version 1 "));
  // Against the config: epoch 1, next batch 2, step 5, batch 4, one rank, so 8 samples this epoch.
  CHECK_THAT(problems({{"epoch_progress", R"({"loss_sum":1,"correct":3,"seen":9})"}}),
             Contains("epoch_progress.seen 9 exceeds the 8 samples"));
  CHECK_THAT(problems({{"epoch_progress", R"({"loss_sum":1,"correct":5,"seen":4})"}}),
             Contains("epoch_progress.correct 5 exceeds epoch_progress.seen 4"));
  CHECK(problems({{"world_size", "2"}, {"epoch_progress", R"({"loss_sum":1,"correct":3,"seen":16})"}}) == "");
  CHECK_THAT(problems({{"step", "1"}, {"optimizer_steps", "1"}}), Contains("step 1 is fewer than the epochs trained"));
  CHECK(problems({{"step", "2"}, {"optimizer_steps", "2"}}) == "");
  CHECK_THAT(problems({{"optimizer_steps", "6"}}), Contains("optimizer_steps 6 exceeds step 5"));
  CHECK_THAT(problems({{"epoch", "3"}}), Contains("epoch 3 (next batch 2) is beyond train.epochs = 3"));
  CHECK_THAT(problems({{"next_batch", "70368744177665"}}), Contains("is beyond 2^48 samples an epoch"));
  CHECK_THAT(problems({{"rng", R"({"seed":8})"}}), Contains("rng seed 8 differs from the config's train.seed 7"));
  CHECK_THAT(problems({{"normalization", R"({"mean":[0.1,0.2],"std":[1,1]})"}}),
             Contains("normalization has 2 channel(s), the config's input has 1"));
}

namespace {

// A JSON object {"a": [0, 0, ...]} of `n` zeros: n + 2 values.
std::string zeros_object(size_t n) {
  std::string s = "{\"a\":[";
  s.reserve(n * 2 + 8);
  for (size_t i = 0; i < n; ++i) s += i ? ",0" : "0";
  return s + "]}";
}

}  // namespace

TEST_CASE("the JSON metadata values of one checkpoint share one cap on the values built", "[cpu]") {
  // Each value alone is within kMaxMetadataJsonValues; the readers keep them together, so they
  // count together. Capped one by one, 7 summary values of 2^22 empty arrays made `cnn-ckpt inspect
  // --json` die of bad_alloc under a 4 GB address-space cap (12 MB of text each, ~250 MB built).
  const std::string half = zeros_object(kMaxMetadataJsonValues / 2);  // 2^21 + 2 values
  test::TempDir dir;
  const std::string path = write_unit_checkpoint(dir, "a.safetensors");
  std::map<std::string, std::string> m = SafetensorsFile::open(path).metadata();
  m["metrics"] = half;
  CHECK_NOTHROW(parse_checkpoint_meta(m, "ckpt"));
  m["epoch_progress"] = half;  // parsed after metrics
  CHECK_THROWS_WITH(parse_checkpoint_meta(m, "ckpt"),
                    Contains("checkpoint 'ckpt': metadata 'epoch_progress' holds more than") &&
                        Contains(fmt::format("what was left of the limit of {} shared", kMaxMetadataJsonValues)));

  // inspect shows the summary value that no longer fits as its text, unparsed.
  SafetensorsWriter w;
  w.add("t", DType::f32, {0}, nullptr, 0);
  w.set_metadata("metrics", half);
  w.set_metadata("schedule", half);  // after "metrics" in key order
  const std::string plain = (dir / "plain.safetensors").string();
  w.write_atomic(plain);
  InspectReport r = inspect_checkpoint(plain);
  CHECK(r.summary["metrics"].is_object());
  CHECK(r.summary["schedule"].is_string());
}

TEST_CASE("inspect --json prints a report whose messages cut a name inside a UTF-8 character", "[cpu]") {
  // A checksum message clips the tensor name to 80 bytes; cut inside a 2-byte character, the
  // report's JSON refused to print ("invalid UTF-8 byte"), and cnn-ckpt failed without naming the file.
  test::TempDir dir;
  std::string name = "a";
  for (int i = 0; i < 50; ++i) name += "\xc3\xa9";  // U+00E9, 2 bytes: byte 80 is inside one
  SafetensorsWriter w;
  w.add(name, DType::f32, {0}, nullptr, 0);
  w.set_metadata(checksum_key(name), "zz");
  const std::string path = (dir / "utf8.safetensors").string();
  w.write_atomic(path);
  InspectReport r = inspect_checkpoint(path);
  REQUIRE(!r.checksum_problem.empty());
  std::string dumped;
  REQUIRE_NOTHROW(dumped = to_json(r).dump());
  CHECK_THAT(dumped, Contains("is not 8 hex digits"));
  CHECK(clip_text(name, 80) == name.substr(0, 79) + "...");
  CHECK(clip_text(name, 81) == name.substr(0, 81) + "...");
  CHECK(clip_text(name, 101) == name);
}

TEST_CASE("inspect and diff tables stay small when one tensor name is very long", "[cpu]") {
  // The name column was as wide as the longest name: one name of 100000 bytes padded each of the
  // 1001 rows to 100000 bytes (100 MB; a header's one 50 MB name among 65536 made terabytes).
  test::TempDir dir;
  SafetensorsWriter w;
  for (int i = 0; i < 1000; ++i) w.add(fmt::format("t{:04}", i), DType::f32, {0}, nullptr, 0);
  const std::string long_name(100000, 'x');
  w.add(long_name, DType::f32, {0}, nullptr, 0);
  const std::string path = (dir / "long.safetensors").string();
  w.write_atomic(path);
  const std::string text = to_text(inspect_checkpoint(path));
  CHECK_THAT(text, Contains("\n" + long_name + "  F32"));
  CHECK_THAT(text, Contains("\nt0999 "));
  CHECK(text.size() < long_name.size() + 1001 * 200);
  const std::string diff = to_text(diff_checkpoints(path, path));
  CHECK_THAT(diff, Contains("  " + long_name + "  "));
  CHECK(diff.size() < long_name.size() + 1001 * 200);
}
