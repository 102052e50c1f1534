// End-to-end tests of `cnn-eval --predict` on faces and video: every face of a picture, the
// annotated picture, a video made here (Motion JPEG through OpenCV's VideoWriter) to per-frame JSONL
// and an annotated video, cameras that are not there. Every run predicts from the checkpoint alone:
// the training data is deleted first.
#include <cmath>
#include <filesystem>
#include <regex>
#include <sstream>
#include <string>

#include "app_util.h"
#include "data/face_detect.h"
#include "data/image_io.h"
#include "data/video_io.h"
#include "eval/face_test_util.h"
#include "support/catch.h"
#include "support/test_util.h"

using namespace cnn;
using namespace cnn::test;
namespace fs = std::filesystem;

namespace {

// One epoch of the small FER model on synthetic faces in dir/run; then the data is deleted, so
// every prediction after it works from the checkpoint alone.
void train_then_drop_data(const TempDir& dir) {
  fs::create_directories(dir / "data");
  write_fer_csv(dir / "data" / "fer.csv", 128, 32, 32);
  write_text_file(dir / "model.yaml", small_model_yaml("fer2013-csv", "data/fer.csv"));
  ProgramResult r = run_program(program_path("cnn-train"), {"model.yaml", "--out", "run", "--quiet"}, dir.path());
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);
  fs::remove_all(dir / "data");
}

ProgramResult eval(const TempDir& dir, const std::vector<std::string>& args) {
  return run_program(program_path("cnn-eval"), args, dir.path());
}

// A trained run (train_then_drop_data) and the picture of three detectable faces side by side
// (gray), with one tile's width.
Image face_run(const TempDir& dir, int64_t* tile_width) {
  train_then_drop_data(dir);
  FaceDetector det;
  std::optional<Image> face = detectable_face(det);
  REQUIRE(face.has_value());
  Image three = tiled(*face, 3);
  REQUIRE(det.faces(three).size() == 3);
  *tile_width = face->width;
  return three;
}

// img shifted right by `dx` pixels, wrapping around.
Image shifted(const Image& img, int64_t dx) {
  Image out = img;
  for (int64_t y = 0; y < img.height; ++y)
    for (int64_t x = 0; x < img.width; ++x)
      out.pixels[size_t(y * img.width + (x + dx) % img.width)] = img.pixels[size_t(y * img.width + x)];
  return out;
}

// Checks one answer of the JSON outputs: a face box inside tile k, and ranked probabilities summing to 1.
void check_face_answer(const nlohmann::json& p, int64_t k, int64_t tile_width) {
  INFO(p.dump());
  REQUIRE(p["face"].is_object());
  CHECK(p["box"] == p["face"]);
  const int64_t x = p["box"]["x"].get<int64_t>(), w = p["box"]["width"].get<int64_t>();
  CHECK(x >= k * tile_width);
  CHECK(x + w <= (k + 1) * tile_width);
  double sum = 0;
  for (const auto& c : p["probabilities"]) sum += c["probability"].get<double>();
  CHECK(sum == Approx(1.0).margin(1e-5));
  CHECK(p["probabilities"].size() == 7);
  CHECK(p["top"] == p["probabilities"][0]["name"]);
}

// Pixels of `a` and `b` (same size) that differ inside the box (x, y, w, h), any channel.
int64_t differing_inside(const Image& a, const Image& b, const nlohmann::json& box) {
  const int64_t x0 = box["x"], y0 = box["y"], w = box["width"], h = box["height"];
  int64_t n = 0;
  for (int64_t y = y0; y < y0 + h; ++y)
    for (int64_t x = x0; x < x0 + w; ++x)
      for (int64_t c = 0; c < 3; ++c) {
        const auto at = [&](const Image& i) { return int(i.pixels[size_t((y * i.width + x) * i.channels + c % i.channels)]); };
        n += at(a) != at(b) ? 1 : 0;
      }
  return n;
}

}  // namespace

TEST_CASE("cnn-eval --predict --detect-faces gives a picture with three faces three answers and draws them", "[cpu]") {
  if (!have_face_detection()) CNN_SKIP("no OpenCV or no Haar cascade in this build: no face detection");
  TempDir dir;
  int64_t tile = 0;
  const Image three = face_run(dir, &tile);
  write_image((dir / "three.png").string(), three);

  ProgramResult r = eval(dir, {"run", "--predict", "three.png", "--detect-faces", "--json", "p.json", "--annotate",
                               "ann.png", "--quiet"});
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);
  for (int k = 1; k <= 3; ++k)
    CHECK(std::regex_search(r.out, std::regex("three\\.png \\(face " + std::to_string(k) +
                                              " of 3: \\d+x\\d+ at \\(\\d+, \\d+\\)\\)\n")));
  CHECK_THAT(r.out, Catch::Matchers::Contains("annotated image written to ann.png"));
  const nlohmann::json j = nlohmann::json::parse(read_text_file(dir / "p.json"));
  REQUIRE(j["predictions"].size() == 3);
  for (int64_t k = 0; k < 3; ++k) {
    const auto& p = j["predictions"][size_t(k)];
    CHECK(p["image"] == "three.png");
    CHECK(p["faces_found"] == 3);
    CHECK_THAT(p["source"].get<std::string>(), Catch::Matchers::Contains("face " + std::to_string(k + 1) + " of 3"));
    check_face_answer(p, k, tile);
  }

  // The annotated picture: same size, in colour, changed inside every box, untouched in the corners.
  const Image ann = read_image((dir / "ann.png").string(), false);
  REQUIRE(ann.width == three.width);
  REQUIRE(ann.height == three.height);
  for (const auto& p : j["predictions"]) CHECK(differing_inside(ann, three, p["box"]) > 0);
  nlohmann::json corners = {{"x", 0}, {"y", three.height - 2}, {"width", 2}, {"height", 2}};
  CHECK(differing_inside(ann, three, corners) == 0);
  corners["x"] = three.width - 2;
  CHECK(differing_inside(ann, three, corners) == 0);

  // Without --detect-faces the picture is one image, classified whole (a model whose input is no face).
  ProgramResult whole = eval(dir, {"run", "--predict", "three.png", "--json", "w.json", "--quiet"});
  INFO(whole.describe());
  REQUIRE(whole.exit_code == 0);
  CHECK_THAT(whole.out, Catch::Matchers::Contains("three.png (whole image)"));
  const nlohmann::json w = nlohmann::json::parse(read_text_file(dir / "w.json"));
  REQUIRE(w["predictions"].size() == 1);
  CHECK(w["predictions"][0]["face"].is_null());
  CHECK(w["predictions"][0]["box"]["width"] == three.width);
}

TEST_CASE("cnn-eval --predict runs a video end to end: per-frame JSONL and an annotated video of the same frames", "[cpu]") {
  if (!have_face_detection()) CNN_SKIP("no OpenCV or no Haar cascade in this build: no face detection");
  TempDir dir;
  int64_t tile = 0;
  const Image three = face_run(dir, &tile);
  const int frames = 6;
  const double fps = 8;
  {
    VideoSink sink((dir / "faces.avi").string(), fps, three.width, three.height);  // Motion JPEG
    for (int i = 0; i < frames; ++i) sink.write(shifted(three, 2 * i));
    sink.close();
  }
  ProgramResult r = eval(dir, {"run", "--predict", "faces.avi", "--detect-faces", "--json", "v.jsonl", "--annotate",
                               "out.avi", "--quiet"});
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);
  for (int i = 0; i < frames; ++i) CHECK_THAT(r.out, Catch::Matchers::Contains("frame " + std::to_string(i) + " at "));
  CHECK_THAT(r.out, Catch::Matchers::Contains("faces.avi: 6 frames of " + std::to_string(three.width) + "x" +
                                              std::to_string(three.height) + " (8 fps), 18 answers"));

  std::istringstream lines(read_text_file(dir / "v.jsonl"));
  std::vector<nlohmann::json> jsonl;
  for (std::string line; std::getline(lines, line);) jsonl.push_back(nlohmann::json::parse(line));
  REQUIRE(jsonl.size() == size_t(frames));
  for (int i = 0; i < frames; ++i) {
    const nlohmann::json& f = jsonl[size_t(i)];
    INFO("frame " << i);
    CHECK(f["frame"] == i);
    CHECK(f["time_s"].get<double>() == Approx(i / fps));
    CHECK(f["width"] == three.width);
    CHECK(f["height"] == three.height);
    CHECK(f["faces_found"] == 3);
    REQUIRE(f["predictions"].size() == 3);
    for (int64_t k = 0; k < 3; ++k) check_face_answer(f["predictions"][size_t(k)], k, tile);
  }

  // The annotated video: the same frame count, size and rate, boxes drawn into the frames.
  VideoSource in((dir / "faces.avi").string()), out((dir / "out.avi").string());
  CHECK(out.width() == three.width);
  CHECK(out.height() == three.height);
  CHECK(out.fps() == Approx(fps));
  Image a, b;
  int count = 0;
  while (out.read(b)) {
    REQUIRE(in.read(a));
    // Motion JPEG is lossy twice over: count pixels off by more than the codec's noise.
    const nlohmann::json& box = jsonl[size_t(std::min(count, frames - 1))]["predictions"][0]["box"];
    int64_t changed = 0;
    for (int64_t y = box["y"]; y < box["y"].get<int64_t>() + box["height"].get<int64_t>(); ++y)
      for (int64_t x = box["x"]; x < box["x"].get<int64_t>() + box["width"].get<int64_t>(); ++x)
        changed += std::abs(int(a.pixels[size_t((y * a.width + x) * 3 + 1)]) -
                            int(b.pixels[size_t((y * b.width + x) * 3 + 1)])) > 60 ? 1 : 0;
    CHECK(changed > 0);
    ++count;
  }
  CHECK(count == frames);

  // Without --detect-faces each frame is one answer, the whole frame; --max-frames stops early.
  ProgramResult whole = eval(dir, {"run", "--predict", "faces.avi", "--max-frames", "2", "--json", "w.jsonl", "--quiet"});
  INFO(whole.describe());
  REQUIRE(whole.exit_code == 0);
  std::istringstream wl(read_text_file(dir / "w.jsonl"));
  int n = 0;
  for (std::string line; std::getline(wl, line); ++n) {
    const nlohmann::json f = nlohmann::json::parse(line);
    REQUIRE(f["predictions"].size() == 1);
    CHECK(f["predictions"][0]["face"].is_null());
    CHECK(f["predictions"][0]["box"]["width"] == three.width);
  }
  CHECK(n == 2);
}

TEST_CASE("cnn-eval --predict camera:N fails with exit 1 naming the index when there is no such camera", "[cpu]") {
  if (!image_io_available()) CNN_SKIP("this build has no OpenCV: no cameras");
  if (fs::exists("/dev/video63")) CNN_SKIP("/dev/video63 exists here");
  TempDir dir;
  train_then_drop_data(dir);
  ProgramResult r = eval(dir, {"run", "--predict", "camera:63", "--quiet"});
  INFO(r.describe());
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Matchers::Contains("cnn-eval: error: camera 63 cannot be opened"));
  ProgramResult bad = eval(dir, {"run", "--predict", "camera:first"});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Matchers::Contains("camera:first"));
}

TEST_CASE("cnn-eval --predict refuses --annotate and video combinations it cannot honour with exit 2", "[cpu]") {
  TempDir dir;
  train_then_drop_data(dir);
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--predict", "a.png", "b.png", "--annotate", "x.png"}, "--annotate draws on one input"},
      {{"--predict", "a.png", "v.avi"}, "as the only --predict input"},
      {{"--predict", "v.avi", "--annotate", "x.png"}, "expected a name like out.avi"},
      {{"--predict", "a.png", "--annotate", "x.avi"}, "expected a name like out.png"},
      {{"--predict", "a.png", "--max-frames", "3"}, "--max-frames needs a video"},
      {{"--annotate", "x.png"}, "--annotate draws on one input"},
  };
  for (const auto& [args, message] : cases) {
    std::vector<std::string> all{"run"};
    all.insert(all.end(), args.begin(), args.end());
    ProgramResult r = eval(dir, all);
    INFO(r.describe());
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Matchers::Contains(message));
  }
}
