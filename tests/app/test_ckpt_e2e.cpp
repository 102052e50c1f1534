// cnn-ckpt on checkpoints of a real training run, and hostile checkpoint files given to both
// cnn-ckpt verify and cnn-train --resume: each must end in a clean "<program>: error: ..." and
// exit 1, never a crash (lib/checkpoint's tests cover the parser itself; here, the programs).
#include <sys/wait.h>

#include <cstdlib>
#include <functional>
#include <set>

#include <fmt/format.h>

#include "app/ckpt_util.h"
#include "checkpoint/checksum.h"
#include "checkpoint/safetensors.h"
#include "data/data_test_util.h"
#include "support/catch.h"

using namespace cnn;
using namespace cnn::test::ckpt;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

// One epoch of models/tiny.yaml on 64 synthetic images (4 steps).
std::string train_tiny(const test::TempDir& dir, const std::string& name, const std::vector<std::string>& extra = {}) {
  std::string out = (dir / name).string();
  std::vector<std::string> args{std::string(CNN_SOURCE_DIR) + "/models/tiny.yaml",
                                "--out",
                                out,
                                "--device",
                                "cpu",
                                "--epochs",
                                "1",
                                "--set",
                                "data.synthetic_size=64",
                                "--quiet"};
  args.insert(args.end(), extra.begin(), extra.end());
  Finished f = run("cnn-train", args);
  INFO(f.describe());
  REQUIRE(f.exit_code == 0);
  return out;
}

Finished ckpt(const std::vector<std::string>& args) { return run("cnn-ckpt", args); }

}  // namespace

TEST_CASE("cnn-ckpt verifies and inspects a checkpoint written by a training run", "[cpu]") {
  test::TempDir dir("cnn-ckpt-e2e");
  std::string run_dir = train_tiny(dir, "run");
  std::string last = run_dir + "/checkpoints/last.safetensors";

  Finished v = ckpt({"verify", last});
  INFO(v.describe());
  CHECK(v.exit_code == 0);
  CHECK_THAT(v.out, Contains("ok    parameters"));
  CHECK_THAT(v.out, Contains("ok    optimizer   sgd slots match"));
  CHECK_THAT(v.out, Contains("\nvalid\n"));
  Finished vj = ckpt({"verify", run_dir, "--json"});
  CHECK(vj.exit_code == 0);
  nlohmann::json vr = nlohmann::json::parse(vj.out);
  CHECK(vr["valid"] == true);
  CHECK(vr["problems"].empty());
  CHECK(vr["checks"].size() == 7);

  Finished i = ckpt({"inspect", last});
  INFO(i.describe());
  CHECK(i.exit_code == 0);
  CHECK_THAT(i.out, Contains("model:         tiny"));
  CHECK_THAT(i.out, Contains("1 of 1 epochs done"));
  CHECK_THAT(i.out, Contains("step:          4 (optimizer steps 4, sgd)"));
  CHECK_THAT(i.out, Contains("checksums:     22 tensors match"));
  CHECK_THAT(i.out, Contains("conv1.weight"));
  CHECK_THAT(i.out, Contains("[4, 1, 3, 3]"));
  CHECK_THAT(i.out, Contains("optim.fc.weight.momentum_buffer"));

  Finished ij = ckpt({"inspect", run_dir, "--json"});
  REQUIRE(ij.exit_code == 0);
  nlohmann::json ir = nlohmann::json::parse(ij.out);
  CHECK(ir["summary"]["model"] == "tiny");
  CHECK(ir["summary"]["epoch"] == 1);
  CHECK(ir["summary"]["step"] == 4);
  CHECK(ir["summary"]["seed"] == 42);
  CHECK(ir["summary"]["metrics"]["epoch"] == 1);
  bool found = false;
  for (const auto& t : ir["tensors"]) {
    if (t["name"] != "conv1.weight") continue;
    found = true;
    CHECK(t["shape"] == nlohmann::json::array({4, 1, 3, 3}));
    CHECK(t["dtype"] == "F32");
    CHECK(t["nan"] == 0);
    CHECK(t["min"].get<double>() <= t["mean"].get<double>());
    CHECK(t["mean"].get<double>() <= t["max"].get<double>());
  }
  CHECK(found);

  Finished c = ckpt({"inspect", last, "--config"});
  CHECK(c.exit_code == 0);
  CHECK_THAT(c.out, Contains("name: tiny"));
}

TEST_CASE("cnn-ckpt diff lists config changes and per-tensor differences", "[cpu]") {
  test::TempDir dir("cnn-ckpt-e2e");
  std::string run_dir = train_tiny(dir, "run");
  std::string first = (dir / "first.safetensors").string();
  fs::copy_file(run_dir + "/checkpoints/last.safetensors", first);
  Finished r = run("cnn-train", {"--resume", run_dir, "--epochs", "2", "--device", "cpu", "--quiet"});
  REQUIRE(r.exit_code == 0);

  Finished d = ckpt({"diff", first, run_dir});
  INFO(d.describe());
  CHECK(d.exit_code == 1);  // the tensors differ
  CHECK_THAT(d.out, Contains("config: 1 difference\n  train.epochs: 1 -> 2"));
  CHECK_THAT(d.out, Contains("step: 4 -> 8"));
  CHECK_THAT(d.out, Contains("tensors: 22 in both"));
  CHECK_THAT(d.out, Contains("\ntensors differ\n"));
  Finished dj = ckpt({"diff", first, run_dir, "--json"});
  REQUIRE(dj.exit_code == 1);
  nlohmann::json j = nlohmann::json::parse(dj.out);
  CHECK(j["identical"] == false);
  CHECK(j["tensors_equal"] == false);
  REQUIRE(j["config"].size() == 1);
  CHECK(j["config"][0]["key"] == "train.epochs");
  for (const auto& t : j["tensors"])
    if (t["name"] == "conv1.weight") CHECK(t["max_abs"].get<double>() > 0);

  Finished same = ckpt({"diff", first, first});
  CHECK(same.exit_code == 0);
  CHECK_THAT(same.out, Contains("(22 identical, 0 differ)"));
  CHECK_THAT(same.out, Contains("\nidentical\n"));
}

TEST_CASE("cnn-ckpt diff exits 0 for equal tensors and lists the metadata that differs apart", "[cpu]") {
  test::TempDir dir("cnn-ckpt-e2e");
  // Two deterministic runs: the same tensors, another elapsed time and throughput.
  std::string one = train_tiny(dir, "one", {"--deterministic"}), two = train_tiny(dir, "two", {"--deterministic"});
  REQUIRE(tensor_differences(one + "/checkpoints/last.safetensors", two + "/checkpoints/last.safetensors") == "");
  Finished d = ckpt({"diff", one, two});
  INFO(d.describe());
  CHECK(d.exit_code == 0);
  CHECK_THAT(d.out, Contains("(22 identical, 0 differ)"));
  CHECK_THAT(d.out, Contains("  elapsed_s: "));
  CHECK_THAT(d.out, Contains("\ntensors equal; metadata differs: elapsed_s, metrics\n"));
  Finished dj = ckpt({"diff", one, two, "--json"});
  CHECK(dj.exit_code == 0);
  nlohmann::json j = nlohmann::json::parse(dj.out);
  CHECK(j["tensors_equal"] == true);
  CHECK(j["metadata_equal"] == false);
  CHECK(j["identical"] == false);
  std::set<std::string> keys;
  for (const auto& m : j["metadata"]) keys.insert(m["key"].get<std::string>());
  CHECK(keys == std::set<std::string>{"elapsed_s", "metrics"});
}

TEST_CASE("cnn-ckpt has --help and --version and exits 2 on usage errors", "[cpu]") {
  Finished v = ckpt({"--version"});
  CHECK(v.exit_code == 0);
  CHECK_THAT(v.out, Contains("cnn-ckpt"));
  for (const char* sub : {"inspect", "verify", "diff"}) {
    Finished h = ckpt({sub, "--help"});
    INFO(h.describe());
    CHECK(h.exit_code == 0);
    CHECK_THAT(h.out, Contains("--json"));
  }
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {}, {"inspect"}, {"diff", "a.safetensors"}, {"verify", "x", "--bogus"}, {"frobnicate", "x"}}) {
    Finished f = ckpt(args);
    INFO(f.describe());
    CHECK(f.exit_code == 2);
    CHECK_THAT(f.err, Contains("cnn-ckpt: error:"));
  }
  Finished missing = ckpt({"inspect", "/nonexistent/ckpt.safetensors"});
  CHECK(missing.exit_code == 1);
  CHECK_THAT(missing.err, Contains("cnn-ckpt: error: checkpoint '/nonexistent/ckpt.safetensors' does not exist"));
}

TEST_CASE("hostile checkpoints give clean errors from cnn-ckpt verify and cnn-train --resume", "[cpu]") {
  test::TempDir dir("cnn-ckpt-e2e");
  std::string run_dir = train_tiny(dir, "run");
  const std::string good = read_file(run_dir + "/checkpoints/last.safetensors");
  const std::string f32x2 = R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  SafetensorsFile parsed = SafetensorsFile::parse(good);
  uint64_t header_len = good.size() - parsed.data_size() - 8;
  std::string flipped = good;
  flipped[8 + header_len + parsed.info("fc.weight").begin + 5] ^= 0x10;

  struct Case {
    const char* name;
    std::string bytes;
    const char* phrase;  // expected in both programs' messages
  };
  const std::vector<Case> cases{
      {"truncated", good.substr(0, good.size() / 2), "run past the end of the data section"},
      {"wrong header length", safetensors_bytes_with_length(header_len + 9, good.substr(8, header_len), ""),
       "larger than the"},
      {"header not JSON", safetensors_bytes("{\"t\": {\"dtype\": ", std::string(8, '\0')), "header is not valid JSON"},
      {"offsets out of range",
       safetensors_bytes(R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", std::string(8, '\0')),
       "run past the end of the data section"},
      {"overlapping offsets",
       safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                         std::string(12, '\0')),
       "overlaps tensor 'a'"},
      {"unknown dtype",
       safetensors_bytes(R"({"t":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", std::string(8, '\0')),
       "unknown dtype 'F33'"},
      {"shape not matching byte size",
       safetensors_bytes(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, '\0')),
       "needs 12 bytes"},
      {"gigantic header length", safetensors_bytes_with_length(~uint64_t{0} >> 1, "{}", ""), "exceeds the limit"},
      {"gigantic tensor",
       safetensors_bytes(
           R"({"t":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,18446744073709551615]}})", ""),
       "overflows"},
      {"not a cnn-train checkpoint", safetensors_bytes("{\"t\":" + f32x2 + "}", std::string(8, '\0')),
       "not a cnn-train checkpoint"},
      {"flipped data byte", flipped, "tensor 'fc.weight'"},
  };
  for (const Case& c : cases) {
    INFO("case: " << c.name);
    std::string path = (dir / (std::string("hostile-") + std::to_string(&c - cases.data()) + ".safetensors")).string();
    write_file(path, c.bytes);
    Finished v = ckpt({"verify", path});
    INFO(v.describe());
    CHECK(v.exit_code == 1);
    CHECK_THAT(v.err, Contains("cnn-ckpt: error: '" + path + "' is not a valid checkpoint:"));
    CHECK_THAT(v.err, Contains(c.phrase));
    CHECK_THAT(v.out, Contains("FAIL"));
    Finished t = run("cnn-train", {"--resume", path, "--device", "cpu"});
    INFO(t.describe());
    CHECK(t.exit_code == 1);
    CHECK_THAT(t.err, Contains("cnn-train: error:"));
    CHECK_THAT(t.err, Contains(c.phrase));
  }
  CHECK_THAT(ckpt({"verify", (dir / "hostile-10.safetensors").string()}).err,
             Contains("checksums: tensor 'fc.weight'"));
  // inspect reads every byte for its statistics: it checks the checksums too, and fails on one.
  for (bool json : {false, true}) {
    std::vector<std::string> args{"inspect", (dir / "hostile-10.safetensors").string()};
    if (json) args.push_back("--json");
    Finished i = ckpt(args);
    INFO(i.describe());
    CHECK(i.exit_code == 1);
    CHECK_THAT(i.err, Contains("cnn-ckpt: error: checkpoint '" + (dir / "hostile-10.safetensors").string() +
                               "' fails its checksums: tensor 'fc.weight'"));
    CHECK_THAT(i.out, Contains(json ? "\"valid\": false" : "checksums:     FAIL: tensor 'fc.weight'"));
  }
}

TEST_CASE("cnn-ckpt inspect and verify read a header of kMaxHeaderTensors zero-size tensors and report them", "[cpu]") {
  // Issue 16: 100000 such entries (5.8 MB, far within the 10^8-byte limit) took 129 s in inspect,
  // its parse being quadratic; verify then listed all their names in one message. Now 2^16 = 65536,
  // the most a header may declare, are read.
  test::TempDir dir("cnn-ckpt-e2e");
  SafetensorsWriter w;
  static_assert(kMaxHeaderTensors == 65536, "the names and counts below");
  for (size_t i = 0; i < kMaxHeaderTensors; ++i) w.add(fmt::format("t{:05}", i), DType::f32, {0}, nullptr, 0);
  const std::string path = (dir / "zeros.safetensors").string();
  w.write_atomic(path);
  Finished text = ckpt({"inspect", path});
  INFO(text.describe().substr(0, 2000));
  CHECK(text.exit_code == 0);
  CHECK_THAT(text.out, Contains("not a cnn-train checkpoint"));
  CHECK_THAT(text.out, Contains("\nt00000 "));
  CHECK_THAT(text.out, Contains("\nt65535 "));
  Finished json = ckpt({"inspect", path, "--json"});
  CHECK(json.exit_code == 0);
  CHECK(nlohmann::json::parse(json.out)["tensors"].size() == kMaxHeaderTensors);
  // verify: not our format, and no checksums; a short message however many tensors lack one.
  Finished v = ckpt({"verify", path});
  CHECK(v.exit_code == 1);
  CHECK_THAT(v.out, Contains("no checksum for 65536 of 65536 tensors (t00000, t00001, t00002 and 65533 more)"));
  CHECK(v.out.size() + v.err.size() < 4000);
}

namespace {

// A copy of the checkpoint `src` at `dst` with its metadata edited (tensors and their checksums kept).
std::string edit_metadata(const std::string& src, const std::string& dst,
                          const std::function<void(std::map<std::string, std::string>&)>& edit) {
  SafetensorsFile f = SafetensorsFile::open(src);
  SafetensorsWriter w;
  for (const TensorInfo& t : f.tensors()) w.add(t.name, t.dtype, t.shape, f.data(t.name), t.bytes());
  std::map<std::string, std::string> meta = f.metadata();
  edit(meta);
  for (const auto& [k, v] : meta) w.set_metadata(k, v);
  w.write_atomic(dst);
  return dst;
}

std::string nested_objects(int depth) {
  std::string s;
  for (int i = 0; i < depth; ++i) s += "{\"a\":";
  return s + "1" + std::string(size_t(depth), '}');
}

// The readers of a checkpoint: inspect (text and JSON), verify, cnn-eval, --resume and --init-from.
std::vector<std::pair<std::string, Finished>> read_with_every_reader(const test::TempDir& dir, const std::string& path,
                                                                     const std::string& tag) {
  const std::string tiny = std::string(CNN_SOURCE_DIR) + "/models/tiny.yaml";
  std::vector<std::pair<std::string, Finished>> out;
  out.emplace_back("inspect", ckpt({"inspect", path}));
  out.emplace_back("inspect --json", ckpt({"inspect", path, "--json"}));
  out.emplace_back("verify", ckpt({"verify", path}));
  out.emplace_back("cnn-eval", run("cnn-eval", {path, "--device", "cpu"}));
  out.emplace_back("--resume", run("cnn-train", {"--resume", path, "--device", "cpu", "--quiet"}));
  out.emplace_back("--init-from", run("cnn-train", {tiny, "--init-from", path, "--out", (dir / ("init-" + tag)).string(),
                                                    "--device", "cpu", "--epochs", "1", "--set",
                                                    "data.synthetic_size=64", "--quiet"}));
  return out;
}

}  // namespace

TEST_CASE("impossible or hostile checkpoint metadata is refused by every reader with a clean error", "[cpu]") {
  test::TempDir dir("cnn-ckpt-e2e");
  const std::string good = train_tiny(dir, "run") + "/checkpoints/last.safetensors";  // epoch 1 of 1, step 4
  using Meta = std::map<std::string, std::string>;
  struct Case {
    const char* name;
    std::function<void(Meta&)> edit;
    const char* phrase;  // expected in every reader's message
  };
  const std::string deep_array = std::string(300000, '[') + std::string(300000, ']');
  const std::vector<Case> cases{
      {"metrics nested 300000 deep", [&](Meta& m) { m["metrics"] = deep_array; },
       "metadata 'metrics' nests deeper than 16 levels"},
      {"schedule nested 300000 deep", [](Meta& m) { m["schedule"] = nested_objects(300000); },
       "metadata 'schedule' nests deeper than 16 levels"},
      {"world_size 2^62", [](Meta& m) { m["world_size"] = "4611686018427387904"; },
       "'world_size' is 4611686018427387904, outside [1, 1048576]"},
      {"next_batch 2^62", [](Meta& m) { m["next_batch"] = "4611686018427387904"; },
       "'next_batch' is 4611686018427387904, outside"},
      {"NaN elapsed time", [](Meta& m) { m["elapsed_s"] = "nan"; }, "'elapsed_s' is 'nan', expected a finite number"},
      {"negative elapsed time", [](Meta& m) { m["elapsed_s"] = "-5"; }, "'elapsed_s' is -5, outside"},
      {"an integer with trailing text", [](Meta& m) { m["step"] = "4 "; }, "'step' is '4 ', expected an integer"},
      {"epoch beyond train.epochs", [](Meta& m) { m["epoch"] = "7"; }, "epoch 7 (next batch 0) is beyond train.epochs = 1"},
      {"more optimizer steps than steps", [](Meta& m) { m["optimizer_steps"] = "9"; }, "optimizer_steps 9 exceeds step 4"},
      {"fewer steps than epochs", [](Meta& m) { m["step"] = "0", m["optimizer_steps"] = "0"; },
       "step 0 is fewer than the epochs trained"},
      {"running sums beyond the data cursor",
       [](Meta& m) {
         m["epoch"] = "0", m["next_batch"] = "1";
         m["epoch_progress"] = R"({"loss_sum":1.0,"correct":1.0,"seen":1000})";
       },
       "epoch_progress.seen 1000 exceeds the 16 samples"},
      {"a seed other than the config's", [](Meta& m) { m["rng"] = R"({"seed":7})"; },
       "rng seed 7 differs from the config's train.seed 42"},
      {"a negative seed", [](Meta& m) { m["rng"] = R"({"seed":-1})"; }, "has no 'seed' that is an integer"},
      {"normalisation for 3 channels", [](Meta& m) { m["normalization"] = R"({"mean":[0.5,0.5,0.5],"std":[1,1,1]})"; },
       "normalization has 3 channel(s), the config's input has 1"},
      {"a zero std", [](Meta& m) { m["normalization"] = R"({"mean":[0.5],"std":[0]})"; }, "'normalization.std' holds 0"},
      {"our format without checksums",
       [](Meta& m) {
         for (auto it = m.begin(); it != m.end();) it = it->first.rfind(kChecksumKeyPrefix, 0) == 0 ? m.erase(it) : ++it;
       },
       "no checksum for"},
  };
  for (const Case& c : cases) {
    INFO("case: " << c.name);
    const std::string tag = std::to_string(&c - cases.data());
    const std::string path = edit_metadata(good, (dir / ("bad-" + tag + ".safetensors")).string(), c.edit);
    for (const auto& [reader, f] : read_with_every_reader(dir, path, tag)) {
      INFO("reader: " << reader << "\n" << f.describe());
      CHECK((f.exit_code == 1 || f.exit_code == 2));
      CHECK_THAT(f.err, Contains(": error: "));
      CHECK_THAT(f.err, Contains(path));
      CHECK_THAT(f.err, Contains(c.phrase));
    }
  }
}

TEST_CASE("cnn-train --init-from takes a plain safetensors file with a warning that it has no checksums", "[cpu]") {
  test::TempDir dir("cnn-ckpt-e2e");
  const std::string last = train_tiny(dir, "run") + "/checkpoints/last.safetensors";
  // The tensors alone, as another program would write them: no format metadata, no checksums.
  SafetensorsFile f = SafetensorsFile::open(last);
  SafetensorsWriter w;
  for (const TensorInfo& t : f.tensors())
    if (t.name.rfind("optim.", 0) != 0) w.add(t.name, t.dtype, t.shape, f.data(t.name), t.bytes());
  const std::string plain = (dir / "plain.safetensors").string();
  w.write_atomic(plain);
  Finished again = run("cnn-train", {std::string(CNN_SOURCE_DIR) + "/models/tiny.yaml", "--init-from", plain, "--out",
                                     (dir / "again").string(), "--device", "cpu", "--epochs", "1", "--set",
                                     "data.synthetic_size=64", "--quiet"});
  INFO(again.describe());
  CHECK(again.exit_code == 0);
  CHECK_THAT(again.err, Contains("'" + plain + "' is not a cnn-train checkpoint and has no checksums"));
  // A plain file whose checksum entries disagree with its bytes is still refused.
  SafetensorsWriter bad;
  for (const TensorInfo& t : f.tensors()) bad.add(t.name, t.dtype, t.shape, f.data(t.name), t.bytes());
  add_checksums(bad);
  bad.set_metadata(checksum_key("fc.bias"), "00000000");
  const std::string corrupt = (dir / "corrupt.safetensors").string();
  bad.write_atomic(corrupt);
  Finished refused = run("cnn-train", {std::string(CNN_SOURCE_DIR) + "/models/tiny.yaml", "--init-from", corrupt,
                                       "--out", (dir / "refused").string(), "--device", "cpu", "--quiet"});
  INFO(refused.describe());
  CHECK(refused.exit_code == 1);
  CHECK_THAT(refused.err, Contains("tensor 'fc.bias'"));
}

// The sizes are caught by the config checks (per-dimension caps) before any graph is built, so
// no reader gets as far as wrapped shape arithmetic.
TEST_CASE("a checkpoint whose config has absurd input sizes is refused as a config error", "[cpu]") {
  test::TempDir dir("cnn-ckpt-e2e");
  const std::string good = train_tiny(dir, "run") + "/checkpoints/last.safetensors";
  const std::string path = edit_metadata(good, (dir / "huge.safetensors").string(), [](auto& m) {
    std::string& c = m["config"];
    const std::string from = "  height: 12\n  width: 12\n";
    REQUIRE(c.find(from) != std::string::npos);
    c.replace(c.find(from), from.size(), "  height: 4294967296\n  width: 4294967296\n");
  });
  Finished v = ckpt({"verify", path});
  INFO(v.describe());
  CHECK(v.exit_code == 1);
  CHECK_THAT(v.err, Contains("is not a valid checkpoint: config: " + path + " (config)"));
  CHECK_THAT(v.err, Contains("input"));
  Finished e = run("cnn-eval", {path, "--device", "cpu"});
  INFO(e.describe());
  CHECK((e.exit_code == 1 || e.exit_code == 2));
  CHECK_THAT(e.err, Contains(path + " (config)"));
  CHECK_THAT(e.err, Contains("input"));
}

TEST_CASE("every checkpoint reader refuses a header of more than kMaxHeaderTensors tensors, naming the file, the count "
          "and the cap",
          "[cpu]") {
  test::TempDir dir("cnn-ckpt-e2e");
  SafetensorsWriter w;
  for (size_t i = 0; i <= kMaxHeaderTensors; ++i) w.add(fmt::format("t{}", i), DType::f32, {0}, nullptr, 0);
  const std::string path = (dir / "many.safetensors").string();
  w.write_atomic(path);
  const std::string phrase = fmt::format("{}: header declares {} tensors, more than the limit of {} tensors per file",
                                         path, kMaxHeaderTensors + 1, kMaxHeaderTensors);
  std::vector<std::pair<std::string, Finished>> readers = read_with_every_reader(dir, path, "many");
  readers.emplace_back("diff", ckpt({"diff", path, path}));
  for (const auto& [reader, f] : readers) {
    INFO("reader: " << reader << "\n" << f.describe().substr(0, 4000));
    CHECK(f.exit_code == 1);
    CHECK_THAT(f.err, Contains(": error: "));
    CHECK_THAT(f.err, Contains(phrase));
  }
}

TEST_CASE("cnn-ckpt inspect --json refuses 1.5 million tensors in a 90 MB header within a 4 GB address space", "[cpu]") {
  // Issue 16 follow-up: this header, inside the 10^8-byte limit, took 22 s in inspect and 3 GB;
  // under `ulimit -v 4 GiB` inspect --json died of a bare std::bad_alloc, naming no file. Past the
  // cap nothing is built, and the rest is only counted. (No address-space cap in an ASan build:
  // its shadow memory reserves terabytes; the timeout still holds.)
  test::TempDir dir("cnn-ckpt-e2e");
  std::string header = "{";
  header.reserve(1'500'000 * 58);
  for (int i = 0; i < 1'500'000; ++i)
    header += fmt::format("{}\"t{:07}\":{{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}", i ? "," : "", i);
  header += "}";
  REQUIRE(header.size() < kMaxHeaderBytes);
  const fs::path path = dir / "huge.safetensors";
  write_file(path, safetensors_bytes(header, ""));
  const std::string cmd = fmt::format("{}exec timeout 60 '{}' inspect --json '{}' >'{}' 2>'{}'",
                                      test::address_space_cap(4096), std::string(CNN_BUILD_DIR) + "/app/cnn-ckpt",
                                      path.string(), (dir / "out.txt").string(), (dir / "err.txt").string());
  const int status = std::system(cmd.c_str());
  const std::string err = read_file(dir / "err.txt");
  INFO(cmd << "\n" << err);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
  CHECK_THAT(err, Contains("cnn-ckpt: error: " + path.string() +
                           ": header declares 1500000 tensors, more than the limit of 65536 tensors per file"));
  CHECK(read_file(dir / "out.txt").empty());
}

TEST_CASE("a checkpoint too large for the memory left is an error naming the file", "[cpu]") {
  // A sparse file of 5 GB of data under `ulimit -v 4 GiB`: the reader holds the whole file, and
  // its allocation failing was a bare "std::bad_alloc". Not run in an ASan build (no cap applies).
  if (test::kAddressSanitizer) {
    WARN("skipped: an AddressSanitizer build cannot run under an address-space cap");
    return;
  }
  test::TempDir dir("cnn-ckpt-e2e");
  const uint64_t n = uint64_t(5) << 30;
  const fs::path path = dir / "big.safetensors";
  write_file(path, safetensors_bytes(fmt::format(R"({{"t":{{"dtype":"U8","shape":[{}],"data_offsets":[0,{}]}}}})", n, n), ""));
  fs::resize_file(path, fs::file_size(path) + n);  // a hole: no disk space used
  const std::string cmd = fmt::format("{}exec timeout 60 '{}' inspect '{}' >/dev/null 2>'{}'", test::address_space_cap(4096),
                                      std::string(CNN_BUILD_DIR) + "/app/cnn-ckpt", path.string(),
                                      (dir / "err.txt").string());
  const int status = std::system(cmd.c_str());
  const std::string err = read_file(dir / "err.txt");
  INFO(cmd << "\n" << err);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
  CHECK_THAT(err, Contains("cnn-ckpt: error: " + path.string() + ": out of memory reading it (5368709"));
}

