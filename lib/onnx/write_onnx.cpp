// OnnxModel -> onnx::ModelProto -> file, through Debian's ONNX library (the only file that sees it
// besides nothing: lib/onnx is its wall). Weights go in raw_data (little-endian floats, as the
// format says), so a 500 MB model is not 130 million repeated-field appends.
// Trap: the checker does not infer shapes; strict shape inference runs after it, so a Gemm whose
// weight does not fit its input is refused here rather than by the first runtime that loads it.
#include "onnx/write.h"

#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "core/error.h"

namespace cnn {
namespace {

void set_dims(onnx::ValueInfoProto* v, const std::string& name, const std::vector<int64_t>& dims) {
  v->set_name(name);
  onnx::TypeProto_Tensor* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx::TensorProto::FLOAT);
  onnx::TensorShapeProto* shape = t->mutable_shape();
  for (int64_t d : dims) {
    onnx::TensorShapeProto_Dimension* dim = shape->add_dim();
    if (d == 0)
      dim->set_dim_param("batch");
    else
      dim->set_dim_value(d);
  }
}

void add_attribute(onnx::NodeProto* n, const OnnxAttribute& a) {
  onnx::AttributeProto* p = n->add_attribute();
  p->set_name(a.name);
  switch (a.kind) {
    case OnnxAttribute::Kind::integer:
      p->set_type(onnx::AttributeProto::INT);
      p->set_i(a.i);
      break;
    case OnnxAttribute::Kind::real:
      p->set_type(onnx::AttributeProto::FLOAT);
      p->set_f(a.f);
      break;
    case OnnxAttribute::Kind::integers:
      p->set_type(onnx::AttributeProto::INTS);
      for (int64_t v : a.ints) p->add_ints(v);
      break;
  }
}

void add_initializer(onnx::GraphProto* g, const OnnxInitializer& t) {
  onnx::TensorProto* p = g->add_initializer();
  p->set_name(t.name);
  for (int64_t d : t.dims) p->add_dims(d);
  if (t.is_int64) {
    p->set_data_type(onnx::TensorProto::INT64);
    for (int64_t v : t.int64s) p->add_int64_data(v);
  } else {
    static_assert(sizeof(float) == 4, "raw_data holds IEEE-754 singles");
    p->set_data_type(onnx::TensorProto::FLOAT);
    p->set_raw_data(std::string(reinterpret_cast<const char*>(t.floats.data()), t.floats.size() * sizeof(float)));
  }
}

onnx::ModelProto to_proto(const OnnxModel& m) {
  onnx::ModelProto model;
  model.set_ir_version(onnx::IR_VERSION);
  model.set_producer_name("cnn-train");
  model.set_producer_version(CNN_VERSION);
  model.set_model_version(1);
  model.set_doc_string(m.doc);
  onnx::OperatorSetIdProto* op = model.add_opset_import();
  op->set_domain("");
  op->set_version(m.opset);
  for (const auto& [key, value] : m.metadata) {
    onnx::StringStringEntryProto* e = model.add_metadata_props();
    e->set_key(key);
    e->set_value(value);
  }
  onnx::GraphProto* g = model.mutable_graph();
  g->set_name(m.graph_name);
  set_dims(g->add_input(), m.input_name, m.input_dims);
  set_dims(g->add_output(), m.output_name, m.output_dims);
  for (const OnnxInitializer& t : m.initializers) add_initializer(g, t);
  for (const OnnxNode& n : m.nodes) {
    onnx::NodeProto* p = g->add_node();
    p->set_op_type(n.op_type);
    p->set_name(n.name);
    for (const auto& i : n.inputs) p->add_input(i);
    for (const auto& o : n.outputs) p->add_output(o);
    for (const auto& a : n.attributes) add_attribute(p, a);
  }
  return model;
}

// The checker, then strict shape inference, which writes value_info into the graph: callers
// serialise first (no copy of a model that may hold half a gigabyte of weights).
void check(onnx::ModelProto& model, const std::string& what) {
  try {
    onnx::checker::check_model(model);
    onnx::shape_inference::InferShapes(model, onnx::OpSchemaRegistry::Instance(),
                                       onnx::ShapeInferenceOptions(true, 1, false));
  } catch (const std::exception& e) {
    CNN_THROW("the ONNX checker refuses {}: {}", what, e.what());
  }
}

std::vector<int64_t> dims_of(const onnx::ValueInfoProto& v) {
  std::vector<int64_t> out;
  for (const auto& d : v.type().tensor_type().shape().dim()) out.push_back(d.has_dim_value() ? d.dim_value() : 0);
  return out;
}

}  // namespace

bool onnx_export_built() { return true; }

std::string onnx_missing_message() { return ""; }

void write_onnx_model(const OnnxModel& m, const std::string& path) {
  onnx::ModelProto model = to_proto(m);
  std::string bytes;
  if (!model.SerializeToString(&bytes))
    CNN_THROW("cannot write '{}': the model does not serialise (protobuf messages stop at 2 GiB)", path);
  check(model, "the exported model");
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) CNN_THROW("cannot write '{}': creating '{}' failed: {}", path, tmp, std::strerror(errno));
    out.write(bytes.data(), std::streamsize(bytes.size()));
    out.close();
    if (!out) {
      std::remove(tmp.c_str());
      CNN_THROW("cannot write '{}': writing '{}' failed", path, tmp);
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    CNN_THROW("cannot write '{}': renaming '{}' over it failed: {}", path, tmp, std::strerror(err));
  }
}

OnnxFileSummary check_onnx_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) CNN_THROW("cannot read ONNX file '{}': {}", path, std::strerror(errno));
  std::stringstream bytes;
  bytes << in.rdbuf();
  onnx::ModelProto model;
  if (!model.ParseFromString(bytes.str())) CNN_THROW("'{}' is not an ONNX model (protobuf parse failed)", path);
  check(model, "'" + path + "'");
  OnnxFileSummary s;
  s.ir_version = model.ir_version();
  for (const auto& o : model.opset_import())
    if (o.domain().empty()) s.opset = o.version();
  s.producer = model.producer_name();
  for (const auto& n : model.graph().node()) s.op_types.push_back(n.op_type());
  if (model.graph().input_size() > 0) s.input_dims = dims_of(model.graph().input(0));
  if (model.graph().output_size() > 0) s.output_dims = dims_of(model.graph().output(0));
  for (const auto& e : model.metadata_props()) s.metadata[e.key()] = e.value();
  return s;
}

}  // namespace cnn
