// cnn-ckpt on checkpoints of a real training run, and hostile checkpoint files given to both
// cnn-ckpt verify and cnn-train --resume: each must end in a clean "<program>: error: ..." and
// exit 1, never a crash (lib/checkpoint's tests cover the parser itself; here, the programs).
#include "app/ckpt_util.h"
#include "checkpoint/safetensors.h"
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
  CHECK(d.exit_code == 0);
  CHECK_THAT(d.out, Contains("config: 1 difference\n  train.epochs: 1 -> 2"));
  CHECK_THAT(d.out, Contains("step: 4 -> 8"));
  CHECK_THAT(d.out, Contains("tensors: 22 in both"));
  CHECK_THAT(d.out, Contains("\ndifferent\n"));
  Finished dj = ckpt({"diff", first, run_dir, "--json"});
  REQUIRE(dj.exit_code == 0);
  nlohmann::json j = nlohmann::json::parse(dj.out);
  CHECK(j["identical"] == false);
  REQUIRE(j["config"].size() == 1);
  CHECK(j["config"][0]["key"] == "train.epochs");
  for (const auto& t : j["tensors"])
    if (t["name"] == "conv1.weight") CHECK(t["max_abs"].get<double>() > 0);

  Finished same = ckpt({"diff", first, first});
  CHECK(same.exit_code == 0);
  CHECK_THAT(same.out, Contains("(22 identical, 0 differ)"));
  CHECK_THAT(same.out, Contains("\nidentical\n"));
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
}
