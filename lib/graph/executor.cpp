// Forward and backward over the planned arena (see executor.h).
#include "graph/executor.h"

#include <cmath>

#include "core/checked.h"
#include "core/error.h"
#include "core/out_of_memory.h"
#include "ops/add.h"
#include "ops/conv2d_weights_bf16.h"
#include "ops/convert.h"

namespace cnn {

static Shape batch_shape(const Shape& per_sample, int64_t n) { return per_sample.with_batch(n); }

// "conv1..fc": the layers a whole-graph buffer serves, for out-of-memory messages.
static std::string layer_span(const Graph& g) {
  if (g.size() == 0) return "(none)";
  const std::string& first = g.node(0).layer->name();
  return g.size() == 1 ? first : first + ".." + g.node(g.size() - 1).layer->name();
}

// An out-of-memory error inside a layer's call, rethrown naming the layer; other errors pass.
template <typename F>
static void naming_layer(const GraphNode& node, const char* phase, F&& call) {
  try {
    call();
  } catch (const OutOfMemoryError& e) {
    throw OutOfMemoryError(fmt::format("layer '{}' ({}) {}: {}", node.layer->name(), node.layer->type(), phase, e.what()));
  }
}

Executor::Executor(Graph& graph, int64_t max_batch, const ExecContext& ctx, bool training)
    : m_graph(graph), m_max_batch(max_batch), m_ctx(ctx) {
  CNN_CHECK(max_batch >= 1, "batch size must be >= 1, got {}", max_batch);
  Device d = ctx.device;
  m_plan = plan_memory(graph, max_batch, training);
  const std::string span = layer_span(graph);
  m_params = Tensor::zeros(Shape{graph.params_size()}, d, fmt::format("parameters of layers {}", span));
  m_grads = Tensor::zeros(Shape{graph.params_size()}, d, fmt::format("gradients of layers {}", span));
  m_buffers = Tensor::zeros(Shape{graph.buffers_size()}, d, fmt::format("buffers (running statistics) of layers {}", span));
  m_arena = Tensor::empty(Shape{m_plan.arena_size}, d,
                          fmt::format("activation arena for layers {} (planned peak {} at batch {})", span,
                                      format_byte_count(double(m_plan.arena_size)), max_batch),
                          DType::u8);
  // Scratch for input gradients that must be accumulated: at most all inputs of one layer, each in
  // its producer's dtype (aligned like the arena).
  int64_t scratch = 0;
  int scratch_owner = 0;
  for (int i = 0; i < graph.size(); ++i) {
    Checked sum = 0;
    for (int in : graph.node(i).inputs)
      if (in != Graph::kModelInput)
        sum = sum + (Checked(graph.node(in).out_shape.numel()) * int64_t(dtype_size(graph.dtype_of(in))) + kArenaAlign);
    if (sum.value("the gradient scratch") > scratch) scratch = sum.value(""), scratch_owner = i;
  }
  // Each input is within the per-tensor cap at max_batch (plan_memory); their sum is checked.
  m_scratch = Tensor::empty(Shape{(Checked(scratch) * max_batch).value("the gradient scratch at the batch")}, d,
                            graph.size() == 0 ? std::string("gradient scratch")
                                              : fmt::format("gradient scratch (inputs of layer '{}' at batch {})",
                                                            graph.node(scratch_owner).layer->name(), max_batch),
                            DType::u8);
  m_input_f32 = Tensor::zeros(batch_shape(graph.input_shape(), max_batch), d,
                              fmt::format("input batch {}", batch_shape(graph.input_shape(), max_batch).to_string()));
  m_input = m_input_f32;
  for (int i = 0; i < graph.size(); ++i) {
    GraphNode& node = graph.node(i);
    std::vector<Tensor> ps, gs;
    for (int p : node.params) {
      ps.push_back(param(p));
      gs.push_back(graph.params()[static_cast<size_t>(p)].trainable ? grad(p) : Tensor());
    }
    node.layer->bind(std::move(ps), std::move(gs));
    naming_layer(node, "buffers", [&] { node.layer->prepare(max_batch, d); });
  }
  setup_weight_packs(training);
}

void Executor::setup_weight_packs(bool training) {
  const Device d = m_ctx.device;
  m_packs = plan_weight_packs(m_graph, m_max_batch, training && d == Device::cuda);
  if (training && d != Device::cuda) m_packs.off_reason = "a CPU run";
  std::vector<WeightPackEntry> table;
  if (!m_packs.empty()) {
    m_packed = Tensor::empty(Shape{m_packs.bytes}, d,
                             fmt::format("prepacked 16-bit weights of layers {} ({})", layer_span(m_graph),
                                         m_packs.describe()),
                             DType::u8);
    char* base = static_cast<char*>(m_packed.raw());
    for (const WeightPackCopy& c : m_packs.copies)
      add_weight_pack(table, param(c.param).data(), base + c.offset, c.dims, c.layout, c.dtype);
    const size_t table_bytes = table.size() * sizeof(WeightPackEntry);
    m_pack_table = Tensor::empty(Shape{int64_t(table_bytes)}, d, "weight pack table", DType::u8);
    device_memcpy(m_pack_table.raw(), d, table.data(), Device::cpu, table_bytes);
    m_pack_count = int(table.size());
    m_pack_groups = weight_pack_slice_groups(table);
  }
  // Every layer is bound (to nothing when it has no copies), so no binding of an earlier executor
  // over this graph survives.
  for (int i = 0; i < m_graph.size(); ++i) {
    std::vector<WeightPackRequest> bound;
    for (const WeightPackPlan::Binding& b : m_packs.bindings[size_t(i)]) {
      WeightPackRequest r = b.request;
      r.copy.data = static_cast<const char*>(m_packed.raw()) + m_packs.copies[size_t(b.copy)].offset;
      bound.push_back(r);
    }
    m_graph.node(i).layer->bind_weight_packs(bound);
  }
}

void Executor::pack_weights() const {
  conv2d_pack_weights_batch_cuda(m_ctx, static_cast<const WeightPackEntry*>(m_pack_table.raw()), m_pack_count,
                                 m_pack_groups);
}

DType Executor::native_input_dtype() const {
  DType common = DType::f32;
  bool any = false;
  for (int i = 0; i < m_graph.size(); ++i) {
    const GraphNode& node = m_graph.node(i);
    if (node.fused_into >= 0) continue;  // reads nothing
    for (int in : node.inputs) {
      if (in != Graph::kModelInput) continue;
      const DType t = node.layer->dtype();
      if (any && t != common) return DType::f32;
      common = t;
      any = true;
    }
  }
  return common == DType::bf16 || common == DType::f16 ? common : DType::f32;
}

void Executor::set_input_dtype(DType t) {
  const DType native = native_input_dtype();
  CNN_CHECK(t == DType::f32 || t == native, "the model input can be stored as f32{}, not {}",
            native == DType::f32 ? "" : fmt::format(" or {} (its readers' dtype)", to_string(native)), to_string(t));
  m_input = Tensor::wrap(m_input_f32.raw(), m_input_f32.shape(), m_input_f32.device(), t);
}

void Executor::convert_input(DType t) {
  if (t == m_input.dtype()) return;
  const ActDims d = act_dims(m_input.shape());
  std::vector<float> nchw(size_t(d.numel()));  // the batch on the host, f32 NCHW (widening is exact)
  if (m_input.dtype() == DType::f32) {
    device_memcpy(nchw.data(), Device::cpu, m_input.raw(), m_input.device(), m_input.bytes());
  } else {
    std::vector<uint16_t> bits(nchw.size());
    device_memcpy(bits.data(), Device::cpu, m_input.raw(), m_input.device(), m_input.bytes());
    nchw = widen(ConstView(bits.data(), m_input.dtype()), d, activation_layout(m_input.dtype()));
  }
  set_input_dtype(t);
  if (t == DType::f32) {
    device_memcpy(m_input.raw(), m_input.device(), nchw.data(), Device::cpu, m_input.bytes());
    return;
  }
  std::vector<uint16_t> bits(nchw.size());  // rounded once, as ConvertForward rounds
  narrow(nchw.data(), d, View(bits.data(), t), activation_layout(t));
  device_memcpy(m_input.raw(), m_input.device(), bits.data(), Device::cpu, m_input.bytes());
}

Tensor Executor::param(int index) {
  const ParamEntry& e = m_graph.params()[static_cast<size_t>(index)];
  Tensor& flat = e.trainable ? m_params : m_buffers;
  return Tensor::wrap(flat.data() + e.offset, e.shape, flat.device());
}

Tensor Executor::grad(int index) {
  const ParamEntry& e = m_graph.params()[static_cast<size_t>(index)];
  CNN_CHECK(e.trainable, "'{}' is a buffer and has no gradient", e.name);
  return Tensor::wrap(m_grads.data() + e.offset, e.shape, m_grads.device());
}

void Executor::init_params(uint64_t seed) {
  for (size_t i = 0; i < m_graph.params().size(); ++i) {
    const ParamEntry& e = m_graph.params()[i];
    Tensor host = Tensor::empty(e.shape);
    init_tensor(host, e.init, seed, e.name);
    param(static_cast<int>(i)).copy_from(host);
  }
}

// A fused activation (GraphNode::fused_into) owns no tensors: its views are its producer's.
static size_t storage_node(const Graph& g, int node) {
  return static_cast<size_t>(g.node(node).fused_into >= 0 ? g.node(node).fused_into : node);
}

Tensor Executor::arena_view(const PlannedTensor& t, const Shape& shape, DType dtype) const {
  return Tensor::wrap(static_cast<char*>(const_cast<void*>(m_arena.raw())) + t.offset, shape, m_arena.device(), dtype);
}

Tensor Executor::act_view(int node, int64_t n) const {
  const PlannedTensor& t = m_plan.activations[storage_node(m_graph, node)];
  return arena_view(t, batch_shape(m_graph.node(node).out_shape, n), m_graph.dtype_of(node));
}

Tensor Executor::grad_view(int node, int64_t n) const {
  const PlannedTensor& t = m_plan.gradients[storage_node(m_graph, node)];
  CNN_CHECK(t.size > 0, "no gradient planned for node {} (executor built for inference)", node);
  return arena_view(t, batch_shape(m_graph.node(node).out_shape, n), m_graph.dtype_of(node));
}

void Executor::convert(const Tensor& from, Tensor& to) const {
  run_op(native_backend(m_ctx.device), ConvertForward{&m_ctx, act_dims(from.shape()), from.view(),
                                                       activation_layout(from.dtype()), to.view(),
                                                       activation_layout(to.dtype())});
}

Tensor Executor::activation(int node) const { return act_view(node, m_n); }

static bool all_finite(const Tensor& t) {
  std::vector<float> v = t.to_vector();
  for (float f : v)
    if (!std::isfinite(f)) return false;
  return true;
}

void Executor::forward(int64_t n, bool training, uint64_t step, uint64_t seed) {
  run_forward(n, training, step, seed, false);
}

int Executor::forward_find_nonfinite(int64_t n, bool training, uint64_t step, uint64_t seed) {
  return run_forward(n, training, step, seed, true);
}

int Executor::run_forward(int64_t n, bool training, uint64_t step, uint64_t seed, bool check_finite) {
  CNN_CHECK(n >= 1 && n <= m_max_batch, "batch of {} samples, executor planned for at most {}", n, m_max_batch);
  m_n = n;
  m_training = training;
  m_step = step;
  m_seed = seed;
  // This step's 16-bit weight copies, before any layer reads them (training forwards only).
  m_packs_fresh = training && m_pack_count > 0;
  if (m_packs_fresh) pack_weights();
  RunContext rc{&m_ctx, training, seed, step, m_device_seed_step, m_packs_fresh};
  Tensor input = Tensor::wrap(m_input.raw(), batch_shape(m_graph.input_shape(), n), m_input.device(), m_input.dtype());
  if (check_finite && !all_finite(input)) return -2;
  for (int i = 0; i < m_graph.size(); ++i) {
    GraphNode& node = m_graph.node(i);
    if (m_timer) m_timer->begin(i, false);
    if (node.fused_into < 0) {  // a fused activation ran in its producer
      const std::vector<Tensor> in_views = inputs_of(i, n, input, true);
      std::vector<const Tensor*> xs;
      for (const Tensor& t : in_views) xs.push_back(&t);
      Tensor y = act_view(i, n);
      naming_layer(node, "forward", [&] { node.layer->forward(rc, xs, y); });
    }
    if (m_timer) m_timer->end(i, false);
    if (check_finite && !all_finite(act_view(i, n))) return i;
  }
  const int last = m_graph.size() - 1;
  const Shape out_shape = batch_shape(m_graph.output_shape(), n);
  if (m_plan.output_f32.size > 0) {  // the loss reads f32
    m_output_view = arena_view(m_plan.output_f32, out_shape, DType::f32);
    convert(act_view(last, n), m_output_view);
    if (m_plan.output_grad_f32.size > 0) m_output_grad_view = arena_view(m_plan.output_grad_f32, out_shape, DType::f32);
  } else {
    m_output_view = act_view(last, n);
    if (m_plan.gradients[storage_node(m_graph, last)].size > 0) m_output_grad_view = grad_view(last, n);
  }
  return -1;
}

std::vector<Tensor> Executor::inputs_of(int i, int64_t n, const Tensor& input, bool forward) const {
  const GraphNode& node = m_graph.node(i);
  std::vector<Tensor> views;
  for (size_t k = 0; k < node.inputs.size(); ++k) {
    const int in = node.inputs[k];
    Tensor src = in == Graph::kModelInput ? input : act_view(in, n);
    CNN_CHECK(in != Graph::kModelInput || src.dtype() == DType::f32 || src.dtype() == node.layer->dtype(),
              "layer '{}' reads the model input as {} but it is stored as {}", node.layer->name(),
              to_string(node.layer->dtype()), to_string(src.dtype()));
    const PlannedCast* c = m_plan.cast_of(i, int(k));
    if (c && src.dtype() != c->to) {  // (a model input stored in the reader's dtype needs none)
      Tensor cast = arena_view(c->act, src.shape(), c->to);
      if (forward) convert(src, cast);  // backward reads the copy forward made
      views.push_back(cast);
    } else {
      views.push_back(src);
    }
  }
  return views;
}

void Executor::backward(const GradHook& hook) {
  CNN_CHECK(m_n > 0, "backward before forward");
  CNN_CHECK(m_training, "backward after an evaluation-mode forward");
  const int64_t n = m_n;
  RunContext rc{&m_ctx, true, m_seed, m_step, m_device_seed_step, m_packs_fresh};
  Tensor input = Tensor::wrap(m_input.raw(), batch_shape(m_graph.input_shape(), n), m_input.device(), m_input.dtype());
  // Which nodes already hold a gradient (the first consumer writes, later ones accumulate).
  std::vector<char> written(static_cast<size_t>(m_graph.size()), 0);
  written.back() = 1;  // the loss wrote d(output)
  const int last = m_graph.size() - 1;
  if (m_plan.output_grad_f32.size > 0) {  // the loss wrote f32: into the last layer's dtype
    Tensor dlast = grad_view(last, n);
    convert(m_output_grad_view, dlast);
  }
  char* scratch = static_cast<char*>(m_scratch.raw());
  for (int i = last; i >= 0; --i) {
    GraphNode& node = m_graph.node(i);
    const std::vector<Tensor> in_views = inputs_of(i, n, input, false);
    std::vector<const Tensor*> xs;
    for (const Tensor& t : in_views) xs.push_back(&t);
    // dx targets: the input's gradient buffer, or scratch when it must be accumulated, or the
    // cast's gradient (the layer's dtype) when the input was converted.
    std::vector<Tensor> dx_views(node.inputs.size());
    std::vector<Tensor*> dxs(node.inputs.size(), nullptr);
    std::vector<int> accumulate;  // input slots whose gradient is added to the producer's
    std::vector<int> converted;   // input slots whose gradient is converted into the producer's
    int64_t scratch_offset = 0;
    auto scratch_view = [&](const Shape& s, DType t) {
      Tensor v = Tensor::wrap(scratch + scratch_offset, s, m_scratch.device(), t);
      scratch_offset += (int64_t(v.bytes()) + kArenaAlign - 1) / kArenaAlign * kArenaAlign;
      return v;
    };
    for (size_t k = 0; k < node.inputs.size(); ++k) {
      int in = node.inputs[k];
      if (in == Graph::kModelInput) continue;
      const Shape s = batch_shape(m_graph.node(in).out_shape, n);
      if (const PlannedCast* c = m_plan.cast_of(i, int(k))) {
        dx_views[k] = arena_view(c->grad, s, c->to);
        converted.push_back(int(k));
        dxs[k] = &dx_views[k];
        continue;
      }
      bool dup_earlier = false;  // the same input twice in one layer (add(x, x))
      for (size_t j = 0; j < k; ++j) dup_earlier |= node.inputs[j] == in;
      if (!written[static_cast<size_t>(in)] && !dup_earlier) {
        dx_views[k] = grad_view(in, n);
        written[static_cast<size_t>(in)] = 1;
      } else {
        dx_views[k] = scratch_view(s, m_graph.dtype_of(in));
        accumulate.push_back(static_cast<int>(k));
      }
      dxs[k] = &dx_views[k];
    }
    Tensor y = act_view(i, n);
    Tensor dy = grad_view(i, n);
    if (m_timer) m_timer->begin(i, true);
    if (node.fused_into < 0) naming_layer(node, "backward", [&] { node.layer->backward(rc, xs, y, dy, dxs); });
    for (int k : converted) {  // into the producer's dtype and layout, written or added
      const int in = node.inputs[static_cast<size_t>(k)];
      if (!written[static_cast<size_t>(in)]) {
        Tensor target = grad_view(in, n);
        convert(dx_views[static_cast<size_t>(k)], target);
        written[static_cast<size_t>(in)] = 1;
      } else {
        Tensor tmp = scratch_view(dx_views[static_cast<size_t>(k)].shape(), m_graph.dtype_of(in));
        convert(dx_views[static_cast<size_t>(k)], tmp);
        dx_views[static_cast<size_t>(k)] = tmp;
        accumulate.push_back(k);
      }
    }
    for (int k : accumulate) {
      Tensor target = grad_view(node.inputs[static_cast<size_t>(k)], n);
      const ConstView two[2] = {target.view(), dx_views[static_cast<size_t>(k)].view()};
      run_op(native_backend(m_ctx.device), AddForward{&m_ctx, target.numel(), 2, two, target.view()});
    }
    if (m_timer) m_timer->end(i, true);
    if (hook) {  // last parameter first: reverse layout order, as the gradient buckets are planned
      for (auto it = node.params.rbegin(); it != node.params.rend(); ++it)
        if (m_graph.params()[static_cast<size_t>(*it)].trainable) hook(*it);
    }
  }
}

}  // namespace cnn
