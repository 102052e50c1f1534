// Inference helpers of cnn-eval: the predictor against the evaluation loop (the slow, obvious
// path), checkpoint choice and round trip, normalisation, class ranking, face crops, and every
// face of a picture in one batch.
#include <cmath>
#include <filesystem>
#include <sstream>
#include <thread>

#include "config/value.h"
#include "data/face_detect.h"
#include "data/image_io.h"
#include "data/loader.h"
#include "data/synthetic_faces.h"
#include "support/catch.h"
#include "support/test_util.h"
#include "checkpoint/checkpoint_state.h"
#include "eval/evaluate.h"
#include "eval/face_test_util.h"
#include "eval/predict.h"
#include "eval/predict_video.h"
#include "data/video_io.h"

using namespace cnn;
namespace fs = std::filesystem;

namespace {

// 3 classes on 12x12 gray images; crop > 0 adds a random crop (the network then sees crop x crop).
ModelSpec small_spec(int64_t crop) {
  std::string yaml =
      "name: p\ninput: {channels: 1, height: 12, width: 12}\nclasses: [a, b, c]\nlayers:\n"
      "  - {name: conv1, type: conv2d, filters: 4, kernel: 3, padding: 1}\n"
      "  - {name: bn1, type: batchnorm}\n  - {name: relu1, type: relu}\n"
      "  - {name: pool1, type: maxpool, kernel: 2}\n  - {name: fc, type: dense, units: 3}\n"
      "data: {format: synthetic, synthetic_size: 40" +
      (crop > 0 ? ", augment: {random_crop: {size: " + std::to_string(crop) + "}}" : std::string()) + "}\n";
  return parse_model_text(yaml, "test.yaml");
}

// Mean cross-entropy and top-1 of probabilities (n, K) against labels.
std::pair<double, double> loss_and_top1(const std::vector<float>& p, const std::vector<int32_t>& y, int64_t K) {
  double loss = 0, correct = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const float* row = p.data() + int64_t(i) * K;
    loss -= std::log(double(row[y[i]]));
    correct += (std::max_element(row, row + K) - row) == y[i] ? 1 : 0;
  }
  return {loss / double(y.size()), correct / double(y.size())};
}

}  // namespace

TEST_CASE("predictor probabilities agree with the evaluation loop, centre crop and ten-crop", "[cpu]") {
  for (bool ten_crop : {false, true}) {
    INFO("ten_crop " << ten_crop);
    ModelSpec spec = small_spec(10);
    auto graph = Graph::build(spec);
    Executor ex(*graph, 40, ExecContext::cpu(1), false);
    ex.init_params(5);
    Dataset d = make_synthetic_faces(25, 3, 1, 12, 12, 3);
    Normalization norm = compute_normalization(d);

    LoaderOptions o;
    o.mode = LoaderMode::eval;
    o.batch_size = 4;
    o.ten_crop = ten_crop;
    Loader loader(d, o, norm, spec.data.augment);
    EvalReport r = evaluate(ex, loader, graph->class_names(), "test");

    Predictor predictor(ex, spec, norm, ten_crop);
    std::vector<float> p = predictor.probabilities(d.pixels.data(), d.size());
    REQUIRE(p.size() == size_t(25 * 3));
    for (int64_t i = 0; i < 25; ++i) CHECK(p[i * 3] + p[i * 3 + 1] + p[i * 3 + 2] == Approx(1.0).margin(1e-6));
    auto [loss, top1] = loss_and_top1(p, d.labels, 3);
    CHECK(loss == Approx(r.loss).epsilon(1e-5));
    CHECK(top1 == Approx(r.top1));
  }
}

TEST_CASE("predictor gives the same probabilities whatever the executor's batch", "[cpu]") {
  Dataset d = make_synthetic_faces(23, 3, 1, 12, 12, 4);
  Normalization norm = compute_normalization(d);
  std::vector<std::vector<float>> results;
  for (int64_t rows : {1, 7, 64}) {
    ModelSpec spec = small_spec(0);
    auto graph = Graph::build(spec);
    Executor ex(*graph, rows, ExecContext::cpu(1), false);
    ex.init_params(9);
    Predictor predictor(ex, spec, norm, false);
    results.push_back(predictor.probabilities(d.pixels.data(), d.size()));
  }
  CHECK(cnn::test::compare(results[0], results[2], cnn::test::Tolerance{1e-6, 1e-5}) == "");
  CHECK(cnn::test::compare(results[1], results[2], cnn::test::Tolerance{1e-6, 1e-5}) == "");
}

TEST_CASE("rank_classes sorts by probability and keeps class order on ties", "[cpu]") {
  std::vector<float> p{0.1f, 0.4f, 0.1f, 0.4f};
  std::vector<ClassProbability> r = rank_classes(p.data(), {"a", "b", "c", "d"});
  REQUIRE(r.size() == 4);
  CHECK(r[0].name == "b");
  CHECK(r[1].name == "d");
  CHECK(r[2].name == "a");
  CHECK(r[3].name == "c");
  CHECK(r[0].probability == Approx(0.4));
}

TEST_CASE("a checkpoint written by the trainer's writer loads into the same predictions", "[cpu]") {
  cnn::test::TempDir dir;
  ModelSpec spec = small_spec(10);
  auto graph = Graph::build(spec);
  Executor ex(*graph, 16, ExecContext::cpu(1), false);
  ex.init_params(11);
  Dataset d = make_synthetic_faces(12, 3, 1, 12, 12, 6);
  Normalization norm = compute_normalization(d);
  std::vector<float> expected = Predictor(ex, spec, norm, false).probabilities(d.pixels.data(), d.size());
  CheckpointMeta meta;
  meta.config_yaml = to_yaml(spec.config);
  meta.seed = spec.train.seed;
  write_checkpoint((dir / "run" / "checkpoints" / "last.safetensors").string(), ex, nullptr, meta);

  TrainedModel m = load_trained_model((dir / "run").string(), "cpu", {"eval.batch_size=25", "eval.ten_crop=true"});
  CHECK(m.which == "last");
  CHECK(m.ten_crop);
  CHECK(m.batch == 2);  // 25 rows / 10 crops
  CHECK(m.ex().max_batch() == 20);
  CHECK(m.class_names == std::vector<std::string>{"a", "b", "c"});
  std::vector<float> got = Predictor(m.ex(), m.spec, norm, false).probabilities(d.pixels.data(), d.size());
  CHECK(cnn::test::compare(got, expected, cnn::test::Tolerance{1e-6, 1e-5}) == "");
}

TEST_CASE("pick_eval_checkpoint prefers a run's best checkpoint, then its last", "[cpu]") {
  cnn::test::TempDir dir;
  std::string which;
  fs::create_directories(dir / "checkpoints");
  CHECK_THROWS_WITH(pick_eval_checkpoint(dir.path().string()), Catch::Matchers::Contains("best.safetensors"));
  cnn::test::write_text_file(dir / "checkpoints" / "last.safetensors", "x");
  CHECK(pick_eval_checkpoint(dir.path().string(), &which) == (dir / "checkpoints" / "last.safetensors").string());
  CHECK(which == "last");
  cnn::test::write_text_file(dir / "checkpoints" / "best.safetensors", "x");
  CHECK(pick_eval_checkpoint(dir.path().string(), &which) == (dir / "checkpoints" / "best.safetensors").string());
  CHECK(which == "best");
  const std::string file = (dir / "checkpoints" / "last.safetensors").string();
  CHECK(pick_eval_checkpoint(file, &which) == file);
  CHECK(which == "file");
  CHECK_THROWS_WITH(pick_eval_checkpoint((dir / "nope").string()), Catch::Matchers::Contains("nope"));
}

TEST_CASE("training_normalization recomputes auto statistics from train and needs the data for it", "[cpu]") {
  ModelSpec spec = small_spec(0);
  DataSplits data;
  data.train = make_synthetic_faces(10, 3, 1, 12, 12, 2);
  Normalization want = compute_normalization(data.train);
  Normalization got = training_normalization(spec, &data);
  CHECK(got.mean == want.mean);
  CHECK(got.std == want.std);
  CHECK_THROWS_WITH(training_normalization(spec, nullptr), Catch::Matchers::Contains("auto"));
  spec.data.normalize.automatic = false;
  spec.data.normalize.mean = {0.5};
  spec.data.normalize.std = {0.25};
  got = training_normalization(spec, nullptr);
  CHECK(got.mean == std::vector<float>{0.5f});
  CHECK(got.std == std::vector<float>{0.25f});
}

TEST_CASE("square_face_crop centres a square with margin and keeps it inside the image", "[cpu]") {
  auto crop = [](FaceBox f, double margin, int64_t h, int64_t w) {
    FaceBox c = square_face_crop(f, margin, h, w);
    return std::vector<int64_t>{c.x, c.y, c.width, c.height};
  };
  CHECK(crop({40, 30, 20, 20}, 0.25, 200, 200) == std::vector<int64_t>{35, 25, 30, 30});
  CHECK(crop({10, 10, 20, 40}, 0.0, 200, 200) == std::vector<int64_t>{0, 10, 40, 40});  // the longer side
  CHECK(crop({0, 0, 20, 20}, 0.5, 200, 200) == std::vector<int64_t>{0, 0, 40, 40});     // shifted in, not clipped
  CHECK(crop({50, 40, 10, 10}, 0.5, 50, 60) == std::vector<int64_t>{40, 30, 20, 20});
  CHECK(crop({0, 0, 100, 80}, 0.2, 90, 120) == std::vector<int64_t>{5, 0, 90, 90});  // shrunk to the image
}

TEST_CASE("face detection falls back to the whole image when there is no face", "[cpu]") {
  if (!image_io_available()) {
    CHECK_THROWS_WITH(FaceDetector(""), Catch::Matchers::Contains("OpenCV"));
    CNN_SKIP("this build has no OpenCV: no face detection");
  }
  try {
    find_face_cascade();
  } catch (const std::exception& e) {
    CNN_SKIP(std::string("no Haar cascade installed: ") + e.what());
  }
  CHECK_THROWS_WITH(FaceDetector("/no/such/cascade.xml"), Catch::Matchers::Contains("/no/such/cascade.xml"));
  cnn::test::TempDir dir;
  std::vector<uint8_t> img(80 * 100);
  for (size_t i = 0; i < img.size(); ++i) img[i] = uint8_t((i % 100) * 2);  // a horizontal ramp
  const std::string path = (dir / "ramp.png").string();
  write_image_file(path, img.data(), 1, 80, 100);
  FaceDetector det;
  CHECK_FALSE(det.largest_face(img.data(), 80, 100).has_value());
  std::vector<uint8_t> got(24 * 24), want(24 * 24);
  FaceImage f = det.read_face(path, 0.1, true, 1, 24, 24, got.data());
  CHECK_FALSE(f.found);
  CHECK(f.image_height == 80);
  CHECK(f.image_width == 100);
  CHECK(f.crop.width == 100);
  REQUIRE(read_image_file(path, true, 1, 24, 24, want.data()));
  CHECK(got == want);
}

TEST_CASE("face detection runs on the CPU and never loads OpenCL", "[cpu]") {
  // The cascade's UMat buffers made OpenCV dlopen libOpenCL.so.1 (and, with a platform, make an
  // OpenCL context on its device); under tools/sanitize.sh that library's thread-local block
  // crashed LeakSanitizer's tracer at exit (lib/data/face_detect_opencv.cpp says how).
  if (!image_io_available()) CNN_SKIP("this build has no OpenCV: no face detection");
  try {
    find_face_cascade();
  } catch (const std::exception& e) {
    CNN_SKIP(std::string("no Haar cascade installed: ") + e.what());
  }
  auto opencl_loaded = [] { return cnn::test::read_text_file("/proc/self/maps").find("libOpenCL") != std::string::npos; };
  // Video I/O (libopencv_videoio) links libOpenCL.so.1 at start: its thread-locals are then in the
  // static TLS block, not a dynamic one the tracer misreads, and there is no load left to watch.
  if (opencl_loaded()) CNN_SKIP("libOpenCL.so.1 is linked at start (through OpenCV's video I/O): nothing to watch");
  std::vector<uint8_t> img(80 * 100, 128);
  FaceDetector det;
  CHECK_FALSE(det.largest_face(img.data(), 80, 100).has_value());
  std::thread other([&] { (void)det.largest_face(img.data(), 80, 100); });  // the switch is per thread
  other.join();
  CHECK_FALSE(opencl_loaded());
}

TEST_CASE("check_ten_crop refuses ten-crop unless some crop dimension is smaller than the input", "[cpu]") {
  ModelSpec spec = small_spec(0);  // 12x12
  CHECK_NOTHROW(check_ten_crop(spec, "x"));  // ten-crop off
  spec.eval.ten_crop = true;
  CHECK_THROWS_WITH(check_ten_crop(spec, "x"), Catch::Matchers::Contains("no data.augment.random_crop"));
  spec.data.augment.crop_size = 12;
  CHECK_THROWS_WITH(check_ten_crop(spec, "x"), Catch::Matchers::Contains("random_crop.size is 12"));
  spec.input.width = 16;  // 12x12 crops of 12x16 images: the corners differ
  CHECK_NOTHROW(check_ten_crop(spec, "x"));
  spec = small_spec(10);
  spec.eval.ten_crop = true;
  CHECK_NOTHROW(check_ten_crop(spec, "x"));
  CHECK(describe_eval_crops(spec, true) ==
        "ten-crop: the mean over 10 crops of 10x10 from 12x12 (corners, centre, each flipped)");
  CHECK(describe_eval_crops(spec, false) == "centre crop 10x10 of 12x12");
  CHECK(describe_eval_crops(small_spec(0), false) == "whole image 12x12");
}

namespace {

// Counts the layers' forward calls (a LayerTimer sees every layer of every forward).
struct ForwardCounter : LayerTimer {
  int64_t calls = 0;
  void begin(int, bool backward) override { calls += backward ? 0 : 1; }
  void end(int, bool) override {}
};

// A Predictor over small_spec(0) with seeded weights and a fixed normalisation, `rows` per forward.
struct SmallPredictor {
  explicit SmallPredictor(int64_t rows)
      : spec(small_spec(0)), graph(Graph::build(spec)), ex(*graph, rows, ExecContext::cpu(1), false),
        predictor(ex, spec, Normalization{{0.5f}, {0.25f}}, false) {
    ex.init_params(3);
  }
  ModelSpec spec;
  std::unique_ptr<Graph> graph;
  Executor ex;
  Predictor predictor;
};

}  // namespace

TEST_CASE("predict_image answers every face of a picture, left to right, in one forward pass", "[cpu]") {
  if (!cnn::test::have_face_detection()) CNN_SKIP("no OpenCV or no Haar cascade in this build: no face detection");
  FaceDetector det;
  const std::optional<Image> face = cnn::test::detectable_face(det);
  REQUIRE(face.has_value());
  const Image three = cnn::test::tiled(*face, 3);
  REQUIRE(det.faces(three).size() == 3);
  SmallPredictor small(8);
  Predictor& predictor = small.predictor;

  ForwardCounter counter;
  small.ex.set_layer_timer(&counter);
  std::vector<uint8_t> crop(12 * 12, 0);
  (void)predictor.probabilities(crop.data(), 1);
  const int64_t per_forward = counter.calls;
  counter.calls = 0;
  const std::vector<RegionPrediction> got = predictor.predict_image(three, &det, 0.1, true);
  CHECK(counter.calls == per_forward);  // three faces, one forward
  small.ex.set_layer_timer(nullptr);

  REQUIRE(got.size() == 3);
  for (int64_t k = 0; k < 3; ++k) {
    const RegionPrediction& r = got[size_t(k)];
    INFO("face " << k << ": " << r.box.to_string());
    CHECK(r.face);
    CHECK(r.box.x >= k * face->width);  // in its own tile: left to right
    CHECK(r.box.x + r.box.width <= (k + 1) * face->width);
    // The same probabilities as its crop classified alone.
    const FaceBox c = square_face_crop(r.box, 0.1, three.height, three.width);
    resize_region(three, c.x, c.y, c.width, c.height, 1, 12, 12, crop.data());
    const std::vector<float> alone = predictor.probabilities(crop.data(), 1);
    REQUIRE(r.ranked.size() == 3);
    for (const ClassProbability& p : r.ranked) {
      const size_t j = size_t(p.name[0] - 'a');
      CHECK(p.probability == Approx(alone[j]).margin(1e-6));
    }
  }
  // An RGB frame of the same picture is seen through its luma: the same answers.
  Image rgb;
  rgb.height = three.height, rgb.width = three.width, rgb.channels = 3;
  for (uint8_t v : three.pixels) rgb.pixels.insert(rgb.pixels.end(), {v, v, v});
  const std::vector<RegionPrediction> from_rgb = predictor.predict_image(rgb, &det, 0.1, true);
  REQUIRE(from_rgb.size() == 3);
  for (size_t k = 0; k < 3; ++k) {
    CHECK(from_rgb[k].box.to_string() == got[k].box.to_string());
    CHECK(from_rgb[k].ranked.front().probability == Approx(got[k].ranked.front().probability).margin(1e-6));
  }
}

TEST_CASE("predict_image without a face: no answer for a video frame, the whole image for a picture", "[cpu]") {
  if (!cnn::test::have_face_detection()) CNN_SKIP("no OpenCV or no Haar cascade in this build: no face detection");
  FaceDetector det;
  SmallPredictor small(4);
  Predictor& predictor = small.predictor;
  Image blank;
  blank.height = 60, blank.width = 80, blank.channels = 1;
  blank.pixels.assign(60 * 80, 128);
  CHECK(predictor.predict_image(blank, &det, 0.1, false).empty());
  const std::vector<RegionPrediction> whole = predictor.predict_image(blank, &det, 0.1, true);
  REQUIRE(whole.size() == 1);
  CHECK_FALSE(whole[0].face);
  CHECK(whole[0].box.to_string() == "80x60 at (0, 0)");
  // Without a detector the whole image is the answer either way (a model whose input is no face).
  const std::vector<RegionPrediction> plain = predictor.predict_image(blank, nullptr, 0.1, false);
  REQUIRE(plain.size() == 1);
  CHECK(plain[0].ranked.front().probability == Approx(whole[0].ranked.front().probability));
}

TEST_CASE("predict_video stops between frames when asked, its JSONL and annotated video complete", "[cpu]") {
  if (!image_io_available()) CNN_SKIP("this build has no OpenCV: no video");
  cnn::test::TempDir dir;
  Image frame;
  frame.height = 30, frame.width = 40, frame.channels = 1;
  frame.pixels.assign(30 * 40, 100);
  {
    VideoSink sink((dir / "in.avi").string(), 5, 40, 30);
    for (int i = 0; i < 4; ++i) sink.write(frame);
    sink.close();
  }
  SmallPredictor small(4);
  Predictor& predictor = small.predictor;
  VideoPredictOptions o;
  o.input = (dir / "in.avi").string();
  o.jsonl = (dir / "out.jsonl").string();
  o.annotate = (dir / "out.avi").string();
  int polls = 0;
  o.stop = [&] { return ++polls > 2; };  // a signal after the second frame
  std::ostringstream text;
  const VideoPredictSummary s = predict_video(predictor, o, text);
  CHECK(s.stopped);
  CHECK(s.frames == 2);
  CHECK(s.answers == 2);  // no detector: the whole frame each
  CHECK(text.str().find("frame 1 at 0.200 s: ") != std::string::npos);
  CHECK(text.str().find("(whole frame)") != std::string::npos);
  std::istringstream lines(cnn::test::read_text_file(dir / "out.jsonl"));
  int n = 0;
  for (std::string line; std::getline(lines, line); ++n) CHECK(nlohmann::json::parse(line)["frame"] == n);
  CHECK(n == 2);
  VideoSource out(o.annotate);
  int frames = 0;
  for (Image f; out.read(f);) ++frames;
  CHECK(frames == 2);
}
