// Model files whose sizes do not fit (issue 16), through the real programs: `cnn-train validate`
// and a one-step training run both exit 2 with a message naming the key, and a checkpoint whose
// config carries such a size is refused by `cnn-ckpt verify` and `cnn-eval` the same way.
#include <string>

#include "app_util.h"
#include "checkpoint/safetensors.h"
#include "support/catch.h"
#include "support/test_util.h"

using namespace cnn::test;
using Catch::Matchers::Contains;

namespace {

std::string model(const std::string& input, const std::string& first_layer) {
  return "name: limits\n"
         "input: " + input + "\n"
         "classes: [a, b]\n"
         "layers:\n"
         "  - " + first_layer + "\n"
         "  - {name: gap, type: global_avgpool}\n"
         "  - {name: fc, type: dense, units: 2}\n"
         "data: {format: synthetic, synthetic_size: 8}\n"
         "train: {epochs: 1, batch_size: 4}\n";
}

struct Case {
  const char* what;
  std::string yaml;
  std::vector<std::string> expect;  // substrings of stderr: the key and the value
};

std::vector<Case> cases() {
  const std::string small = "{channels: 1, height: 8, width: 8}";
  // Values past a key's own cap (2^20 per dimension) are refused at that key by the schema; values
  // within it whose products pass the per-tensor cap are refused by the graph at the layer or input.
  return {
      {"conv same padding with a kernel of 2^62 + 1 (crash 1)",
       model(small, "{name: conv1, type: conv2d, filters: 2, kernel: 4611686018427387905, padding: same, dilation: 3}"),
       {"layers[0].kernel", "4611686018427387905"}},
      {"conv same padding whose dilated kernel passes an int",
       model(small, "{name: conv1, type: conv2d, filters: 2, kernel: 1048576, padding: same, dilation: 1048576}"),
       {"conv1", "does not fit", "out of range"}},
      {"an input of 2^32 x 2^32 pixels (crash 2)",
       model("{channels: 1, height: 4294967296, width: 4294967296}", "{name: conv1, type: conv2d, filters: 2, kernel: 3}"),
       {"input.height", "4294967296"}},
      {"an input of 2 x 32768 x 32769 values",
       model("{channels: 2, height: 32768, width: 32769}", "{name: conv1, type: conv2d, filters: 2, kernel: 3}"),
       {"'input'", "2147549184 elements", "per-tensor cap"}},
      {"a stride of 2^32 + 1", model(small, "{name: conv1, type: conv2d, filters: 2, kernel: 3, stride: 4294967297}"),
       {"layers[0].stride", "4294967297"}},
      {"a padding of 2^32", model(small, "{name: conv1, type: conv2d, filters: 2, kernel: 3, padding: 4294967296}"),
       {"layers[0].padding", "4294967296"}},
      {"filters 2^63 - 1", model(small, "{name: conv1, type: conv2d, filters: 9223372036854775807, kernel: 1}"),
       {"layers[0].filters", "9223372036854775807"}},
      {"weights of 2^20 filters x 4096 channels",
       model("{channels: 4096, height: 1, width: 1}", "{name: conv1, type: conv2d, filters: 1048576, kernel: 1}"),
       {"conv1", "per-tensor cap"}},
  };
}

}  // namespace

TEST_CASE("validate and a one-step training run refuse sizes that do not fit with exit 2", "[cpu]") {
  for (const Case& c : cases()) {
    SECTION(c.what) {
      TempDir dir("cnn-limits");
      write_text_file(dir / "m.yaml", c.yaml);
      const ProgramResult v = run_program(program_path("cnn-train"), {"validate", "m.yaml"}, dir.path());
      INFO(v.describe());
      CHECK(v.exit_code == 2);
      for (const std::string& s : c.expect) CHECK_THAT(v.err, Contains(s));
      CHECK_THAT(v.err, Contains("m.yaml"));
      const ProgramResult t = run_program(program_path("cnn-train"),
                                          {"m.yaml", "--device", "cpu", "--max-steps", "1", "--out", "run", "--quiet"},
                                          dir.path());
      INFO(t.describe());
      CHECK(t.exit_code == 2);
      for (const std::string& s : c.expect) CHECK_THAT(t.err, Contains(s));
    }
  }
}

TEST_CASE("a checkpoint whose config has an input that does not fit is refused by verify and eval", "[cpu]") {
  TempDir dir("cnn-limits-ckpt");
  write_text_file(dir / "m.yaml", model("{channels: 1, height: 8, width: 8}",
                                        "{name: conv1, type: conv2d, filters: 2, kernel: 3}"));
  const ProgramResult t = run_program(program_path("cnn-train"),
                                      {"m.yaml", "--device", "cpu", "--max-steps", "1", "--out", "run", "--quiet"},
                                      dir.path());
  INFO(t.describe());
  REQUIRE(t.exit_code == 0);
  // The same checkpoint with the input grown to 2^32 x 2^32 in its config (no tensor depends on it).
  const std::string ckpt = (dir / "run/checkpoints/last.safetensors").string();
  const cnn::SafetensorsFile in = cnn::SafetensorsFile::open(ckpt);
  cnn::SafetensorsWriter out;
  for (const std::string& name : in.names()) {
    const cnn::TensorInfo& info = in.info(name);
    const std::vector<uint8_t> bytes = in.read_bytes(name);
    out.add(name, info.dtype, info.shape, bytes.data(), bytes.size());
  }
  for (const auto& [key, value] : in.metadata()) {
    std::string v = value;
    if (key == "config") {
      for (const char* dim : {"height: 8", "width: 8"}) {
        const size_t at = v.find(dim);
        REQUIRE(at != std::string::npos);
        v.replace(at, std::string(dim).size(), std::string(dim).substr(0, std::string(dim).size() - 1) + "4294967296");
      }
    }
    out.set_metadata(key, v);
  }
  const std::string bad = (dir / "bad.safetensors").string();
  out.write_atomic(bad);
  const ProgramResult verify = run_program(program_path("cnn-ckpt"), {"verify", bad}, dir.path());
  INFO(verify.describe());
  CHECK(verify.exit_code != 0);
  CHECK_THAT(verify.out + verify.err, Contains("input.height"));
  CHECK_THAT(verify.out + verify.err, Contains("4294967296"));
  const ProgramResult eval = run_program(program_path("cnn-eval"), {bad, "--device", "cpu"}, dir.path());
  INFO(eval.describe());
  CHECK(eval.exit_code == 2);
  CHECK_THAT(eval.err, Contains("input.height"));
  CHECK_THAT(eval.err, Contains("4294967296"));
}
