// ONNX end-to-end helpers (see onnx_e2e_util.h).
#include "onnx/onnx_e2e_util.h"

#include <algorithm>
#include <fstream>
#include <random>

#include "app/app_util.h"
#include "eval/predict.h"
#include "layers/registry.h"

namespace cnn::test::onnx_e2e {

namespace fs = std::filesystem;

ckpt::Finished train_briefly(const std::string& name, const std::string& run_dir, const std::vector<std::string>& sets) {
  const bool file = name.size() > 5 && name.compare(name.size() - 5, 5, ".yaml") == 0;
  const std::string model = file ? name : (fs::path(CNN_SOURCE_DIR) / "models" / (name + ".yaml")).string();
  std::vector<std::string> args{model, "--out", run_dir, "--max-steps", "2", "--batch", "4", "--device", "cpu", "--quiet"};
  std::vector<std::string> all = ckpt::narrowing(model);
  for (const char* s : {"data.format=synthetic", "data.synthetic_size=8", "eval.batch_size=4", "train.optimizer.lr=0.0001"})
    all.push_back(s);
  // Running statistics of the last batch alone: eval then normalises as training did, instead of
  // mixing two batches into the initial (0, 1), which saturates deep models' probabilities.
  for (const LayerSpec& l : load_model_spec(model).layers)
    if (l.type == "batchnorm") all.push_back("layers." + l.name + ".momentum=1");
  all.insert(all.end(), sets.begin(), sets.end());
  for (const auto& s : all) args.insert(args.end(), {"--set", s});
  return ckpt::run("cnn-train", args);
}

ckpt::Finished export_onnx(const std::string& run_dir, const std::string& out, const std::vector<std::string>& flags) {
  std::vector<std::string> args{"export", run_dir, "-o", out};
  args.insert(args.end(), flags.begin(), flags.end());
  return ckpt::run("cnn-ckpt", args);
}

ckpt::Finished python_onnx_check(const std::string& path) {
  const char* script =
      "import sys\n"
      "try:\n"
      "    import onnx\n"
      "except ImportError as e:\n"
      "    print('python3-onnx is not installed:', e)\n"
      "    sys.exit(3)\n"
      "m = onnx.load(sys.argv[1])\n"
      "onnx.checker.check_model(m, full_check=True)\n"
      "print('ok', m.opset_import[0].version)\n";
  // ckpt::run starts programs of the build tree; python is the system's.
  ckpt::Finished f;
  const ProgramResult r = run_program("/usr/bin/python3", {"-c", script, path});
  f.exit_code = r.exit_code;
  f.out = r.out;
  f.err = r.err;
  f.command = r.command;
  return f;
}

std::vector<uint8_t> random_images(int64_t n, int64_t c, int64_t h, int64_t w, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> pixel(0, 255);
  std::vector<uint8_t> out(size_t(n * c * h * w));
  for (auto& v : out) v = uint8_t(pixel(rng));
  return out;
}

std::vector<float> our_probabilities(const std::string& run_dir, const std::vector<uint8_t>& images, int64_t n) {
  TrainedModel m = load_trained_model(run_dir, "cpu");
  Predictor p(m.ex(), m.spec, eval_normalization(m, nullptr), false, m.class_names);
  return p.probabilities(images.data(), n);
}

namespace {

void write_npy_bytes(const std::string& path, const char* descr, const void* data, size_t bytes,
                     const std::vector<int64_t>& shape) {
  std::string dims;
  for (int64_t d : shape) dims += std::to_string(d) + ", ";
  std::string header = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  header.append(63 - (10 + header.size()) % 64, ' ');  // magic, version and length take 10 bytes
  header += '\n';
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write("\x93NUMPY\x01\x00", 8);
  const uint16_t len = uint16_t(header.size());
  const char le[2] = {char(len & 0xff), char(len >> 8)};
  f.write(le, 2);
  f << header;
  f.write(static_cast<const char*>(data), std::streamsize(bytes));
}

}  // namespace

void write_npy(const std::string& path, const std::vector<uint8_t>& values, const std::vector<int64_t>& shape) {
  write_npy_bytes(path, "|u1", values.data(), values.size(), shape);
}

void write_npy(const std::string& path, const std::vector<float>& values, const std::vector<int64_t>& shape) {
  write_npy_bytes(path, "<f4", values.data(), values.size() * sizeof(float), shape);
}

float smallest_top_probability(const std::vector<float>& probs, int64_t k) {
  float lowest = 1.0f;
  for (size_t r = 0; r + size_t(k) <= probs.size(); r += size_t(k))
    lowest = std::min(lowest, *std::max_element(probs.begin() + long(r), probs.begin() + long(r) + k));
  return lowest;
}

}  // namespace cnn::test::onnx_e2e
