// libFuzzer target for the safetensors reader: any bytes must either parse or throw cnn::Error
// (anything else escaping, a crash, or a sanitizer report is a finding), and a file it accepts must
// come back identical after a rewrite through SafetensorsWriter. Trap: with CNN_FUZZ_WRITE_SEEDS=DIR
// the binary only writes its seed corpus (valid files made by the writer) into DIR and exits.
#include <string>
#include <vector>

#include "checkpoint/checksum.h"
#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "fuzz_util.h"

using namespace cnn;

namespace {

[[noreturn]] void finding(const char* what) { fuzz::finding("fuzz_safetensors", what); }

void write_seeds(const std::string& dir) {
  std::vector<SafetensorsWriter> seeds(5);
  seeds[1].set_metadata("format", "cnn-train/1");
  float weights[6] = {0.5f, -1.0f, 2.0f, 0.0f, -0.25f, 8.0f};
  seeds[2].add_f32("conv1.weight", {1, 2, 3}, weights);
  seeds[2].add_f32("conv1.bias", {1}, weights);
  seeds[2].add("empty", DType::f32, {0, 4}, nullptr, 0);
  add_checksums(seeds[2]);
  uint16_t halves[4] = {0x3C00, 0xC000, 0x7C00, 0x0001};
  seeds[3].add("h", DType::f16, {2, 2}, halves, 8);
  seeds[3].add("b", DType::bf16, {4}, halves, 8);
  double d = 1.5;
  seeds[3].add("d", DType::f64, {}, &d, 8);
  int64_t steps[2] = {1, -1};
  seeds[3].add("optim.step", DType::i64, {2}, steps, 16);
  seeds[3].set_metadata("epoch", "12");
  uint8_t bytes[3] = {1, 0, 1};
  seeds[4].add("mask", DType::boolean, {3}, bytes, 3);
  seeds[4].add("u", DType::u8, {1, 1, 1}, bytes, 1);
  seeds[4].add("z", DType::i8, {0}, nullptr, 0);
  for (size_t i = 0; i < seeds.size(); ++i) seeds[i].write_atomic(dir + "/seed-" + std::to_string(i) + ".safetensors");
}

bool same_info(const TensorInfo& a, const TensorInfo& b) {
  return a.name == b.name && a.dtype == b.dtype && a.shape == b.shape && a.begin == b.begin && a.end == b.end;
}

}  // namespace

CNN_FUZZ_SEEDS(write_seeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  SafetensorsFile file;
  try {
    file = SafetensorsFile::parse(bytes, "fuzz");
  } catch (const Error&) {
    return 0;
  }
  bool rewritable = true;
  for (const auto& t : file.tensors()) {
    if (file.read_bytes(t.name).size() != t.bytes()) finding("read_bytes size differs from the offsets");
    if (t.dtype == DType::f32 || t.dtype == DType::f64 || t.dtype == DType::f16 || t.dtype == DType::bf16) {
      if (file.read_f32(t.name).size() != static_cast<size_t>(t.numel())) finding("read_f32 size differs from numel");
    }
    rewritable = rewritable && !t.name.empty();  // the writer refuses empty names by design
  }
  (void)verify_checksums(file);
  if (!rewritable) return 0;

  // Accepted files survive a rewrite: same tensors at the same offsets, same bytes, same metadata.
  SafetensorsWriter writer;
  for (const auto& t : file.tensors()) writer.add(t.name, t.dtype, t.shape, file.data(t.name), t.bytes());
  for (const auto& [key, value] : file.metadata()) writer.set_metadata(key, value);
  SafetensorsFile again = SafetensorsFile::parse(writer.serialize(), "rewrite");
  if (again.tensors().size() != file.tensors().size()) finding("rewrite changed the tensor count");
  for (size_t i = 0; i < file.tensors().size(); ++i) {
    const TensorInfo& t = file.tensors()[i];
    if (!same_info(t, again.tensors()[i])) finding("rewrite changed a tensor's header entry");
    if (again.read_bytes(t.name) != file.read_bytes(t.name)) finding("rewrite changed a tensor's bytes");
  }
  if (again.metadata() != file.metadata()) finding("rewrite changed the metadata");
  return 0;
}
