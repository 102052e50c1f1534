// A real consumer of the exported models: OpenCV DNN (cv::dnn::readNetFromONNX, Debian's
// libopencv-dnn-dev 4.6) computes the probabilities our CPU forward (cnn-eval's Predictor) computes,
// within 1e-4, for the FER and Fashion-MNIST models trained for two steps; and the README's OpenCV
// snippet, built from the README as printed (tests/CMakeLists.txt), prints the same numbers.
#include <opencv2/dnn.hpp>
#include <opencv2/imgcodecs.hpp>

#include <cmath>
#include <filesystem>
#include <sstream>

#include "app/app_util.h"
#include "checkpoint/checkpoint_state.h"
#include "onnx/onnx_e2e_util.h"
#include "onnx/write.h"
#include "support/catch.h"
#include "support/test_util.h"

using namespace cnn;
using namespace cnn::test::onnx_e2e;
namespace fs = std::filesystem;

namespace {

constexpr double kProbabilityTolerance = 1e-4;  // the bound; float32 differences are ~1e-6

struct Case {
  const char* model;
  int64_t c, h, w;  // the data input size (the exported model's input)
};

// OpenCV DNN's probabilities (n, K) for uint8 images (n, c, h, w), fed as a float NCHW blob.
std::vector<float> opencv_probabilities(const std::string& onnx, const std::vector<uint8_t>& images, int n, int c,
                                        int h, int w) {
  cv::dnn::Net net = cv::dnn::readNetFromONNX(onnx);
  const int dims[4] = {n, c, h, w};
  cv::Mat blob(4, dims, CV_32F);
  for (size_t i = 0; i < images.size(); ++i) blob.ptr<float>()[i] = float(images[i]);
  net.setInput(blob);
  const cv::Mat out = net.forward();
  REQUIRE(out.total() % size_t(n) == 0);
  return std::vector<float>(out.ptr<float>(), out.ptr<float>() + out.total());
}

double max_abs_difference(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(double(a[i]) - double(b[i])));
  return worst;
}

// Some running mean of the checkpoint is off its initial 0: the batchnorm statistics were trained.
bool batchnorm_trained(const std::string& run) {
  const LoadedCheckpoint c = read_checkpoint(run);
  for (const std::string& name : c.file.names())
    if (name.size() > 13 && name.compare(name.size() - 13, 13, ".running_mean") == 0)
      for (float v : c.file.read_f32(name))
        if (std::fabs(v) > 1e-6f) return true;
  return false;
}

}  // namespace

TEST_CASE("OpenCV DNN computes our probabilities from the exported FER and Fashion-MNIST models", "[cpu]") {
  if (!onnx_export_built()) CNN_SKIP(onnx_missing_message());
  test::TempDir dir("cnn-onnx-dnn");
  // vgg_fer keeps its 40x40 crop of the 48x48 input (the model's Slice), without ten-crop.
  for (const Case& k : {Case{"fashion_cnn", 1, 28, 28}, Case{"fer_cnn", 1, 48, 48}, Case{"mini_xception", 1, 48, 48},
                        Case{"vgg_fer", 1, 48, 48}}) {
    INFO(k.model);
    const std::string run = (dir / k.model).string();
    auto f = train_briefly(k.model, run, {"eval.ten_crop=false"});
    INFO(f.describe());
    REQUIRE(f.exit_code == 0);
    CHECK(batchnorm_trained(run));
    const int n = 5;
    const std::vector<uint8_t> images = random_images(n, k.c, k.h, k.w, 7);
    const std::vector<float> ours = our_probabilities(run, images, n);
    const int64_t K = int64_t(ours.size()) / n;
    REQUIRE(smallest_top_probability(ours, K) < 0.999f);  // not saturated: a wrong model would show

    for (const std::vector<std::string>& flags :
         {std::vector<std::string>{}, std::vector<std::string>{"--keep-batchnorm", "--opset", "13"}}) {
      const std::string onnx = (dir / (std::string(k.model) + ".onnx")).string();
      f = export_onnx(run, onnx, flags);
      INFO(f.describe());
      REQUIRE(f.exit_code == 0);
      const std::vector<float> theirs = opencv_probabilities(onnx, images, n, int(k.c), int(k.h), int(k.w));
      CHECK(max_abs_difference(ours, theirs) <= kProbabilityTolerance);
    }
  }
}

// Every layer type and key form on RGB images with a crop: a batch of several images through the
// (C, 1, 1) normalisation constants (a (1, C, 1, 1) Sub made OpenCV 4.6 compute other numbers).
TEST_CASE("OpenCV DNN computes our probabilities for every layer type on RGB crops", "[cpu]") {
  if (!onnx_export_built()) CNN_SKIP(onnx_missing_message());
  test::TempDir dir("cnn-onnx-every");
  const std::string yaml = (dir / "every_layer.yaml").string(), run = (dir / "run").string();
  test::ckpt::write_file(yaml,
                         "name: every_layer\n"
                         "input: {channels: 3, height: 20, width: 20}\n"
                         "classes: [a, b, c, d]\n"
                         "layers:\n"
                         "  - {name: conv1, type: conv2d, filters: 8, kernel: 3, padding: same, bias: false}\n"
                         "  - {name: bn1, type: batchnorm}\n"
                         "  - {name: act1, type: leaky_relu, alpha: 0.2}\n"
                         "  - {name: dw, type: conv2d, filters: 8, kernel: 3, padding: 2, dilation: 2, groups: 8}\n"
                         "  - {name: act2, type: elu}\n"
                         "  - {name: side, type: conv2d, filters: 8, kernel: 1, groups: 2, inputs: [act1]}\n"
                         "  - {name: sum, type: add, inputs: [act2, side, act1]}\n"
                         "  - {name: cat, type: concat, inputs: [sum, act1]}\n"
                         "  - {name: pool, type: avgpool, kernel: 3, stride: 2, padding: 1}\n"
                         "  - {name: mp, type: maxpool, kernel: 3, stride: 2, padding: 1}\n"
                         "  - {name: sig, type: sigmoid}\n"
                         "  - {name: drop, type: dropout, p: 0.4}\n"
                         "  - {name: fc1, type: dense, units: 16}\n"
                         "  - {name: bn2, type: batchnorm}\n"
                         "  - {name: th, type: tanh}\n"
                         "  - {name: flat, type: flatten}\n"
                         "  - {name: fc2, type: dense, units: 4, bias: false}\n"
                         "  - {name: relu, type: relu}\n"
                         "data: {format: synthetic, augment: {random_crop: {size: 16}}}\n"
                         "train: {epochs: 1, batch_size: 4, optimizer: {type: sgd, lr: 0.001}}\n");
  auto f = train_briefly(yaml, run);
  INFO(f.describe());
  REQUIRE(f.exit_code == 0);
  const int n = 5;
  const std::vector<uint8_t> images = random_images(n, 3, 20, 20, 5);
  const std::vector<float> ours = our_probabilities(run, images, n);
  REQUIRE(smallest_top_probability(ours, 4) < 0.999f);
  for (const std::vector<std::string>& flags :
       {std::vector<std::string>{}, std::vector<std::string>{"--keep-batchnorm", "--opset", "13"}}) {
    const std::string onnx = (dir / "every_layer.onnx").string();
    f = export_onnx(run, onnx, flags);
    INFO(f.describe());
    REQUIRE(f.exit_code == 0);
    CHECK(max_abs_difference(ours, opencv_probabilities(onnx, images, n, 3, 20, 20)) <= kProbabilityTolerance);
  }
}

TEST_CASE("the README's OpenCV snippet, built as printed, prints our probabilities", "[cpu]") {
  if (!onnx_export_built()) CNN_SKIP(onnx_missing_message());
  test::TempDir dir("cnn-onnx-snippet");
  const std::string run = (dir / "mx").string(), onnx = (dir / "mini_xception.onnx").string();
  auto f = train_briefly("mini_xception", run);
  INFO(f.describe());
  REQUIRE(f.exit_code == 0);
  f = export_onnx(run, onnx);
  INFO(f.describe());
  REQUIRE(f.exit_code == 0);
  const std::vector<uint8_t> pixels = random_images(1, 1, 48, 48, 3);
  const std::string png = (dir / "face.png").string();
  REQUIRE(cv::imwrite(png, cv::Mat(48, 48, CV_8UC1, const_cast<uint8_t*>(pixels.data()))));
  const std::vector<float> ours = our_probabilities(run, pixels, 1);

  const test::ProgramResult r =
      test::run_program((fs::path(CNN_BUILD_DIR) / "tests" / "cnn-deploy-snippet").string(), {onnx, png, "48", "48"});
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);
  std::istringstream lines(r.out);
  std::vector<float> printed(ours.size(), -1.0f);
  int index = 0;
  double p = 0;
  while (lines >> index >> p) {
    REQUIRE(index >= 0);
    REQUIRE(size_t(index) < printed.size());
    printed[size_t(index)] = float(p);
  }
  CHECK(max_abs_difference(ours, printed) <= kProbabilityTolerance);
}
