// Convolution sweep files (bench/sweeps/README.md, format 1) and the conv layers of model files,
// expanded into the points `cnn-bench conv` times. Checked against a schema (config/schema.h), so
// a bad key or value is a ConfigError naming file:line:col and the key path.
// Trap: model points take each model's train.batch_size and are deduplicated by shape across all
// models (the first model naming a shape owns it), so the counts are not per model.
#pragma once

#include <string>
#include <vector>

#include "config/value.h"
#include "ops/conv2d.h"
#include "ops/conv2d_algo.h"

namespace cnn {

struct ConvPoint {
  std::string group;  // "base shapes", a sweep's name, or "model <name>"
  std::string name;   // "L1", "L1_batch/N=64", "vgg_a/conv3_1"
  Conv2dShape shape;
  std::vector<ConvDir> directions;
  int warmup = 5;
  int repeats = 20;
};

// Points of one sweep file: every base shape, then every sweep's points, in file order.
std::vector<ConvPoint> load_conv_sweep(const std::string& path);
std::vector<ConvPoint> parse_conv_sweep(const Value& root);  // a parsed file (parse_yaml)

// --sweep / --shape: the points of sweep files whose sweep name matches one of `sweeps` or, for base
// shapes, whose name matches one of `shapes` (shell patterns, bench/conv_bench.h: glob_match);
// model points are kept. Both empty: all points. A pattern that matches nothing is a ConfigError
// that lists the names there are.
std::vector<ConvPoint> select_conv_points(const std::vector<ConvPoint>& points, const std::vector<std::string>& sweeps,
                                          const std::vector<std::string>& shapes);

// Every conv2d layer of the models (per-sample shapes at each model's default batch size),
// deduplicated by shape.
std::vector<ConvPoint> model_conv_points(const std::vector<std::string>& model_files);

}  // namespace cnn
