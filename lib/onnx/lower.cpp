// Lowering of our graph to ONNX nodes (see lower.h). Each ONNX tensor a layer makes has the layer's
// per-sample shape with the batch in front, so global_avgpool is GlobalAveragePool then Flatten,
// and dense over a (C, H, W) input flattens it first (NCHW order, as our dense reads it).
// Trap: the forms chosen are the ones OpenCV 4.6's importer reads too (Gemm with a constant bias,
// Add rather than Sum, dropout and a flat flatten as no node at all, Slice with constant inputs).
#include "onnx/lower.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "core/error.h"

namespace cnn {
namespace {

using Kind = OnnxAttribute::Kind;

OnnxAttribute attr_int(const std::string& name, int64_t v) { return {name, Kind::integer, v, 0.0f, {}}; }
OnnxAttribute attr_real(const std::string& name, double v) { return {name, Kind::real, 0, float(v), {}}; }
OnnxAttribute attr_ints(const std::string& name, std::vector<int64_t> v) { return {name, Kind::integers, 0, 0.0f, std::move(v)}; }

// The keys of each layer type that the lowering reads or that do not change inference (the
// layer's backend, algorithm, precision and initialiser; batchnorm's momentum; dropout's p).
// A key missing here is a key whose meaning the export would drop.
const std::set<std::string>* known_keys(const std::string& type) {
  static const std::map<std::string, std::set<std::string>> keys{
      {"conv2d", {"filters", "kernel", "stride", "dilation", "padding", "groups", "bias", "init"}},
      {"dense", {"units", "bias", "init"}},
      {"maxpool", {"kernel", "stride", "padding"}},
      {"avgpool", {"kernel", "stride", "padding"}},
      {"global_avgpool", {}},
      {"relu", {}},
      {"leaky_relu", {"alpha"}},
      {"elu", {"alpha"}},
      {"sigmoid", {}},
      {"tanh", {}},
      {"batchnorm", {"momentum", "eps"}},
      {"dropout", {"p"}},
      {"flatten", {}},
      {"add", {}},
      {"concat", {}},
  };
  auto it = keys.find(type);
  return it == keys.end() ? nullptr : &it->second;
}

bool is_common_key(const std::string& key) {
  return key == "name" || key == "type" || key == "inputs" || key == "backend" || key == "algo" || key == "precision";
}

class Lowering {
 public:
  Lowering(const Graph& g, const ParamReader& read, const OnnxLowerOptions& o) : m_g(g), m_read(read), m_opt(o) {
    m_out.resize(size_t(g.size()));
    m_folded.assign(size_t(g.size()), false);
  }

  OnnxModel run(const OnnxInputSpec& in) {
    m_m.opset = m_opt.opset;
    m_m.input_dims = {m_opt.batch, in.channels, in.data_height, in.data_width};
    front(in);
    for (int i = 0; i < m_g.size(); ++i) {
      if (m_folded[size_t(i)]) continue;
      lower_node(i);
    }
    const GraphNode& last = m_g.node(m_g.size() - 1);
    if (last.out_shape.rank() != 1)
      fail(m_g.size() - 1, fmt::format("the final layer's output {} is not one score per class", last.out_shape.to_string()));
    add_node("Softmax", "softmax", {m_out.back()}, m_m.output_name, {attr_int("axis", 1)});
    m_m.output_dims = {m_opt.batch, last.out_shape[0]};
    check_unique_names();
    return std::move(m_m);
  }

 private:
  [[noreturn]] void fail(int i, const std::string& why) const {
    const Layer& l = *m_g.node(i).layer;
    CNN_THROW("cannot export layer '{}' ({}, {}) to ONNX: {}", l.name(), l.type(), l.where().to_string(), why);
  }

  // Tensors are named after layers, and the export adds its own (input, cropped, centered,
  // normalized, probabilities, <layer>.flat, ...): a layer named like one of them would give a
  // name two values, which ONNX forbids.
  void check_unique_names() const {
    std::set<std::string> seen{m_m.input_name};
    for (const OnnxInitializer& t : m_m.initializers) seen.insert(t.name);
    for (const OnnxNode& n : m_m.nodes)
      for (const std::string& o : n.outputs)
        if (!seen.insert(o).second)
          CNN_THROW("cannot export to ONNX: two values would be named '{}' (a layer named like a tensor the export "
                    "adds: input, cropped, centered, normalized, probabilities, or <layer>.flat and the like); "
                    "rename that layer",
                    o);
  }

  const Value& attr(int i, const char* key) const { return m_g.node(i).layer->attrs()[key]; }

  std::string input_of(int i, size_t slot = 0) const {
    const int p = m_g.node(i).inputs[slot];
    return p == Graph::kModelInput ? m_input : m_out[size_t(p)];
  }

  void add_node(const std::string& op, const std::string& name, std::vector<std::string> inputs,
                const std::string& output, std::vector<OnnxAttribute> attrs = {}) {
    m_m.nodes.push_back(OnnxNode{op, name, std::move(inputs), {output}, std::move(attrs)});
  }

  std::string add_floats(const std::string& name, std::vector<int64_t> dims, std::vector<float> values) {
    OnnxInitializer t;
    t.name = name;
    t.dims = std::move(dims);
    t.floats = std::move(values);
    m_m.initializers.push_back(std::move(t));
    return name;
  }
  std::string add_int64s(const std::string& name, std::vector<int64_t> values) {
    OnnxInitializer t;
    t.name = name;
    t.dims = {int64_t(values.size())};
    t.int64s = std::move(values);
    t.is_int64 = true;
    m_m.initializers.push_back(std::move(t));
    return name;
  }

  // The centre crop (when the network input is smaller than the data input) and the normalisation.
  void front(const OnnxInputSpec& in) {
    const Shape& net = m_g.input_shape();
    if (net.rank() != 3 || net[0] != in.channels || net[1] > in.data_height || net[2] > in.data_width)
      CNN_THROW("cannot export to ONNX: the network input {} does not fit images of {}x{}x{}", net.to_string(),
                in.channels, in.data_height, in.data_width);
    if (int64_t(in.norm.mean.size()) != in.channels || int64_t(in.norm.std.size()) != in.channels)
      CNN_THROW("cannot export to ONNX: the normalisation has {} means and {} stds for {} channels",
                in.norm.mean.size(), in.norm.std.size(), in.channels);
    std::string x = m_m.input_name;
    if (net[1] != in.data_height || net[2] != in.data_width) {
      const int64_t y0 = (in.data_height - net[1]) / 2, x0 = (in.data_width - net[2]) / 2;  // Augmenter::center_crop
      add_node("Slice", "center_crop",
               {x, add_int64s("center_crop.starts", {y0, x0}), add_int64s("center_crop.ends", {y0 + net[1], x0 + net[2]}),
                add_int64s("center_crop.axes", {2, 3})},
               "cropped");
      x = "cropped";
    }
    // (v / 255 - mean) / std, the loader's table, as (v - 255 mean) / (255 std).
    std::vector<float> mean, stdev;
    for (int64_t c = 0; c < in.channels; ++c) {
      mean.push_back(float(255.0 * in.norm.mean[size_t(c)]));
      stdev.push_back(float(255.0 * in.norm.std[size_t(c)]));
    }
    // (C, 1, 1) constants, broadcast from the right over (N, C, H, W): OpenCV 4.6 computes a Sub
    // of a (1, C, 1, 1) constant wrongly for a batch of more than one image.
    add_node("Sub", "normalize_mean", {x, add_floats("normalize.mean", {in.channels, 1, 1}, mean)}, "centered");
    add_node("Div", "normalize_std", {"centered", add_floats("normalize.std", {in.channels, 1, 1}, stdev)},
             "normalized");
    m_input = "normalized";
  }

  void check_keys(int i) const {
    const Layer& l = *m_g.node(i).layer;
    const std::set<std::string>* known = known_keys(l.type());
    if (!known) fail(i, "the exporter has no ONNX form for this layer type");
    for (const auto& [key, value] : l.attrs().entries())
      if (!is_common_key(key) && !known->count(key))
        fail(i, fmt::format("its key '{}' has no ONNX form in this exporter", key));
  }

  void lower_node(int i) {
    const GraphNode& n = m_g.node(i);
    const std::string& type = n.layer->type();
    const std::string& name = n.layer->name();
    check_keys(i);
    m_out[size_t(i)] = name;
    if (type == "conv2d") return conv2d(i);
    if (type == "dense") return dense(i);
    if (type == "batchnorm") return batchnorm(i, input_of(i));
    if (type == "maxpool" || type == "avgpool") return pool(i);
    if (type == "global_avgpool") {
      add_node("GlobalAveragePool", name, {input_of(i)}, name + ".4d");
      return add_node("Flatten", name + ".flatten", {name + ".4d"}, name, {attr_int("axis", 1)});
    }
    if (type == "relu") return add_node("Relu", name, {input_of(i)}, name);
    if (type == "leaky_relu") return add_node("LeakyRelu", name, {input_of(i)}, name, {attr_real("alpha", attr(i, "alpha").real())});
    if (type == "elu") return add_node("Elu", name, {input_of(i)}, name, {attr_real("alpha", attr(i, "alpha").real())});
    if (type == "sigmoid") return add_node("Sigmoid", name, {input_of(i)}, name);
    if (type == "tanh") return add_node("Tanh", name, {input_of(i)}, name);
    if (type == "dropout") {  // identity at inference: no node, the name stands for the input
      m_out[size_t(i)] = input_of(i);
      return;
    }
    if (type == "flatten") {
      if (n.in_shape0.rank() == 1) {
        m_out[size_t(i)] = input_of(i);
        return;
      }
      return add_node("Flatten", name, {input_of(i)}, name, {attr_int("axis", 1)});
    }
    if (type == "add") {
      std::string acc = input_of(i, 0);
      for (size_t k = 1; k < n.inputs.size(); ++k) {
        const std::string out = k + 1 == n.inputs.size() ? name : fmt::format("{}.sum{}", name, k);
        add_node("Add", k + 1 == n.inputs.size() ? name : out, {acc, input_of(i, k)}, out);
        acc = out;
      }
      return;
    }
    if (type == "concat") {
      std::vector<std::string> ins;
      for (size_t k = 0; k < n.inputs.size(); ++k) ins.push_back(input_of(i, k));
      return add_node("Concat", name, ins, name, {attr_int("axis", 1)});
    }
    fail(i, "the exporter has no ONNX form for this layer type");
  }

  std::vector<float> param(int i, size_t k, const Shape& expect) const {
    const GraphNode& n = m_g.node(i);
    if (k >= n.params.size()) fail(i, fmt::format("it has {} parameter tensors, expected at least {}", n.params.size(), k + 1));
    const ParamEntry& e = m_g.params()[size_t(n.params[k])];
    if (e.shape != expect) fail(i, fmt::format("'{}' is {}, expected {}", e.name, e.shape.to_string(), expect.to_string()));
    std::vector<float> v = m_read(n.params[k]);
    if (int64_t(v.size()) != expect.numel())
      fail(i, fmt::format("'{}' read {} values, expected {}", e.name, v.size(), expect.numel()));
    return v;
  }
  const std::string& param_name(int i, size_t k) const { return m_g.params()[size_t(m_g.node(i).params[k])].name; }

  // The batchnorm that only this node feeds (and that reads only it), when folding is on.
  int foldable_batchnorm(int i) const {
    if (!m_opt.fold_batchnorm) return -1;
    const GraphNode& n = m_g.node(i);
    if (n.consumers.size() != 1) return -1;
    const int j = n.consumers[0];
    const GraphNode& b = m_g.node(j);
    if (b.layer->type() != "batchnorm" || b.inputs.size() != 1 || b.inputs[0] != i) return -1;
    return j;
  }

  // Scales output channel k of weight (K, rest) and shifts the bias: w' = w s, b' = (b - mean) s + beta,
  // s = gamma / sqrt(var + eps), in double.
  void fold(int j, int64_t K, std::vector<float>& w, std::vector<float>& b) {
    check_keys(j);
    const Shape c{K};
    const std::vector<float> gamma = param(j, 0, c), beta = param(j, 1, c), mean = param(j, 2, c), var = param(j, 3, c);
    const double eps = attr(j, "eps").real();
    const size_t rest = w.size() / size_t(K);
    for (size_t k = 0; k < size_t(K); ++k) {
      const double s = double(gamma[k]) / std::sqrt(double(var[k]) + eps);
      for (size_t r = 0; r < rest; ++r) w[k * rest + r] = float(double(w[k * rest + r]) * s);
      b[k] = float((double(b[k]) - double(mean[k])) * s + double(beta[k]));
    }
    m_folded[size_t(j)] = true;
  }

  // A conv2d or dense layer's weight (w_shape, output channels first) and bias (zeros without
  // one), with the batchnorm that alone reads it folded in; names the node's (and that
  // batchnorm's) output.
  struct Weights {
    std::vector<float> w, b;
    std::string w_name, b_name, node_name;
    bool has_bias = false;
  };
  Weights weights_folded(int i, const Shape& w_shape) {
    const std::string& name = m_g.node(i).layer->name();
    const int64_t K = w_shape[0];
    Weights r;
    r.has_bias = attr(i, "bias").boolean();
    r.w = param(i, 0, w_shape);
    r.b = r.has_bias ? param(i, 1, Shape{K}) : std::vector<float>(size_t(K), 0.0f);
    r.w_name = param_name(i, 0);
    r.b_name = r.has_bias ? param_name(i, 1) : name + ".bias";
    r.node_name = name;
    const int j = foldable_batchnorm(i);
    if (j >= 0) {
      fold(j, K, r.w, r.b);
      const std::string& bn = m_g.node(j).layer->name();
      r.w_name += "+" + bn, r.b_name = name + ".bias+" + bn, r.node_name = name + "+" + bn;
      r.has_bias = true;
      m_out[size_t(i)] = m_out[size_t(j)] = bn;
    }
    return r;
  }

  void conv2d(int i) {
    const GraphNode& n = m_g.node(i);
    const int64_t C = n.in_shape0[0], K = attr(i, "filters").integer(), groups = attr(i, "groups").integer();
    const auto [R, S] = attr(i, "kernel").pair();
    const auto [sh, sw] = attr(i, "stride").pair();
    const auto [dh, dw] = attr(i, "dilation").pair();
    std::pair<int64_t, int64_t> pad;
    const Value& padding = attr(i, "padding");
    if (padding.kind() == Value::Kind::string)  // "same": odd dilated kernels only (the layer checked)
      pad = {dh * (R - 1) / 2, dw * (S - 1) / 2};
    else
      pad = padding.pair();
    Weights p = weights_folded(i, Shape{K, C / groups, R, S});
    std::vector<std::string> ins{input_of(i), add_floats(p.w_name, {K, C / groups, R, S}, std::move(p.w))};
    if (p.has_bias) ins.push_back(add_floats(p.b_name, {K}, std::move(p.b)));
    add_node("Conv", p.node_name, ins, m_out[size_t(i)],
             {attr_ints("kernel_shape", {R, S}), attr_ints("strides", {sh, sw}),
              attr_ints("pads", {pad.first, pad.second, pad.first, pad.second}), attr_ints("dilations", {dh, dw}),
              attr_int("group", groups)});
  }

  void dense(int i) {
    const GraphNode& n = m_g.node(i);
    const std::string& name = n.layer->name();
    const int64_t C = n.in_shape0.numel(), K = attr(i, "units").integer();
    std::string x = input_of(i);
    if (n.in_shape0.rank() != 1) {  // our dense reads the (C, H, W) input flat, in NCHW order
      add_node("Flatten", name + ".flatten", {x}, name + ".flat", {attr_int("axis", 1)});
      x = name + ".flat";
    }
    Weights p = weights_folded(i, Shape{K, C});
    // Gemm always gets its bias (zeros without one): OpenCV 4.6 reads Gemm with a constant C.
    add_node("Gemm", p.node_name,
             {x, add_floats(p.w_name, {K, C}, std::move(p.w)), add_floats(p.b_name, {K}, std::move(p.b))},
             m_out[size_t(i)], {attr_int("transB", 1)});
  }

  void batchnorm(int i, const std::string& x) {
    const GraphNode& n = m_g.node(i);
    const std::string& name = n.layer->name();
    const Shape c{n.in_shape0[0]};
    std::vector<std::string> ins{x};
    for (size_t k = 0; k < 4; ++k) ins.push_back(add_floats(param_name(i, k), {c[0]}, param(i, k, c)));
    add_node("BatchNormalization", name, ins, name, {attr_real("epsilon", attr(i, "eps").real())});
  }

  void pool(int i) {
    const GraphNode& n = m_g.node(i);
    const auto [R, S] = attr(i, "kernel").pair();
    const auto [sh, sw] = attr(i, "stride").pair();
    const auto [ph, pw] = attr(i, "padding").pair();
    std::vector<OnnxAttribute> a{attr_ints("kernel_shape", {R, S}), attr_ints("strides", {sh, sw}),
                                 attr_ints("pads", {ph, pw, ph, pw})};
    const bool max = n.layer->type() == "maxpool";
    if (!max) a.push_back(attr_int("count_include_pad", 0));  // our average leaves the padding out
    add_node(max ? "MaxPool" : "AveragePool", n.layer->name(), {input_of(i)}, n.layer->name(), std::move(a));
  }

  const Graph& m_g;
  const ParamReader& m_read;
  OnnxLowerOptions m_opt;
  OnnxModel m_m;
  std::string m_input;
  std::vector<std::string> m_out;  // the ONNX tensor that holds each node's output
  std::vector<bool> m_folded;      // batchnorms folded into their producer
};

}  // namespace

OnnxModel lower_to_onnx(const Graph& graph, const ParamReader& params, const OnnxInputSpec& input,
                        const OnnxLowerOptions& options) {
  if (options.opset < kOnnxMinOpset || options.opset > kOnnxMaxOpset)
    CNN_THROW("ONNX opset {} is not supported: expected {} to {}", options.opset, kOnnxMinOpset, kOnnxMaxOpset);
  if (options.batch < 0) CNN_THROW("ONNX batch {} is negative: expected 0 (dynamic) or a size", options.batch);
  return Lowering(graph, params, options).run(input);
}

}  // namespace cnn
