// Optimizer construction, the OpenMP CPU step over segments, the CUDA step's plan, and checkpoint state.
// One parallel region per step with a worksharing loop per segment: no per-segment thread start-up.
// Trap: the CPU and CUDA steps must build their per-step constants the same way (update_constants).
#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "optim/optim_math.h"

namespace cnn {

namespace {

// Below this many elements the step runs on one thread: starting threads costs more than it saves.
constexpr int64_t kParallelMinElements = 1 << 15;

const std::vector<std::string>& known_types() {
  static const std::vector<std::string> types{"sgd", "adam", "adamw", "rmsprop"};
  return types;
}

OptimizerKind parse_kind(const std::string& type) {
  if (type == "sgd") return OptimizerKind::sgd;
  if (type == "adam") return OptimizerKind::adam;
  if (type == "adamw") return OptimizerKind::adamw;
  if (type == "rmsprop") return OptimizerKind::rmsprop;
  CNN_THROW("unknown optimizer type '{}' (known: sgd, adam, adamw, rmsprop){}", type,
            did_you_mean(type, known_types()));
}

void check_spec(const OptimizerSpec& s, OptimizerKind kind) {
  CNN_CHECK(s.weight_decay >= 0.0, "optimizer {}: weight_decay must be >= 0, got {}", s.type, s.weight_decay);
  CNN_CHECK(s.lr >= 0.0, "optimizer {}: lr must be >= 0, got {}", s.type, s.lr);
  if (kind == OptimizerKind::sgd || kind == OptimizerKind::rmsprop) {
    CNN_CHECK(s.momentum >= 0.0 && s.momentum < 1.0, "optimizer {}: momentum must be in [0, 1), got {}", s.type,
              s.momentum);
  }
  if (kind == OptimizerKind::sgd) {
    CNN_CHECK(!s.nesterov || s.momentum > 0.0, "optimizer sgd: nesterov needs momentum > 0, got momentum {}",
              s.momentum);
  }
  if (kind == OptimizerKind::adam || kind == OptimizerKind::adamw) {
    CNN_CHECK(s.beta1 >= 0.0 && s.beta1 < 1.0, "optimizer {}: beta1 must be in [0, 1), got {}", s.type, s.beta1);
    CNN_CHECK(s.beta2 >= 0.0 && s.beta2 < 1.0, "optimizer {}: beta2 must be in [0, 1), got {}", s.type, s.beta2);
  }
  if (kind == OptimizerKind::rmsprop) {
    CNN_CHECK(s.alpha >= 0.0 && s.alpha < 1.0, "optimizer rmsprop: alpha must be in [0, 1), got {}", s.alpha);
  }
  if (kind != OptimizerKind::sgd) {
    CNN_CHECK(s.eps >= 0.0, "optimizer {}: eps must be >= 0, got {}", s.type, s.eps);
  }
}

void check_segments(const std::vector<ParamSegment>& segments, int64_t total) {
  CNN_CHECK(total >= 0, "optimizer: negative parameter count {}", total);
  std::vector<const ParamSegment*> by_offset;
  for (const ParamSegment& s : segments) {
    CNN_CHECK(!s.name.empty(), "optimizer: a parameter segment at offset {} has no name", s.offset);
    CNN_CHECK(s.offset >= 0 && s.count >= 0 && s.offset + s.count <= total,
              "optimizer: parameter '{}' [{}, {}) lies outside the buffer of {} floats", s.name, s.offset,
              s.offset + s.count, total);
    CNN_CHECK(s.shape.rank() == 0 || s.shape.numel() == s.count,
              "optimizer: parameter '{}' has {} elements but shape {}", s.name, s.count, s.shape.to_string());
    by_offset.push_back(&s);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](const ParamSegment* a, const ParamSegment* b) {
    return a->offset < b->offset;
  });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const ParamSegment& a = *by_offset[i - 1];
    const ParamSegment& b = *by_offset[i];
    CNN_CHECK(a.offset + a.count <= b.offset || a.count == 0 || b.count == 0,
              "optimizer: parameters '{}' [{}, {}) and '{}' [{}, {}) overlap", a.name, a.offset,
              a.offset + a.count, b.name, b.offset, b.offset + b.count);
  }
  std::vector<std::string> names;
  for (const ParamSegment& s : segments) names.push_back(s.name);
  std::sort(names.begin(), names.end());
  auto dup = std::adjacent_find(names.begin(), names.end());
  CNN_CHECK(dup == names.end(), "optimizer: parameter '{}' is listed twice", *dup);
}

// The constants of step t for one weight-decay value, computed once on the host in double.
UpdateConstants update_constants(OptimizerKind kind, const OptimizerSpec& s, double lr, double wd, int64_t t) {
  UpdateConstants c;
  c.kind = kind;
  if (kind == OptimizerKind::sgd) {
    c.sgd = SgdConstants{static_cast<float>(lr), static_cast<float>(s.momentum), static_cast<float>(wd), s.nesterov};
  } else if (kind == OptimizerKind::adam || kind == OptimizerKind::adamw) {
    c.adam = adam_constants(lr, s.beta1, s.beta2, s.eps, wd, kind == OptimizerKind::adamw, t);
  } else {
    c.rmsprop = RmspropConstants{static_cast<float>(lr),       static_cast<float>(s.alpha),
                                 static_cast<float>(1.0 - s.alpha), static_cast<float>(s.eps),
                                 static_cast<float>(s.momentum), static_cast<float>(wd)};
  }
  return c;
}

std::string join_limited(const std::vector<std::string>& items) {
  constexpr size_t kShown = 8;
  std::string out;
  for (size_t i = 0; i < items.size() && i < kShown; ++i) out += (i ? ", " : "") + items[i];
  if (items.size() > kShown) out += fmt::format(", ... ({} more)", items.size() - kShown);
  return out;
}

}  // namespace

Optimizer::Optimizer(const OptimizerSpec& spec, std::vector<ParamSegment> segments, int64_t total, Device device)
    : m_spec(spec), m_kind(parse_kind(spec.type)), m_segments(std::move(segments)), m_total(total), m_device(device) {
  check_spec(m_spec, m_kind);
  check_segments(m_segments, m_total);
  switch (m_kind) {
    case OptimizerKind::sgd:
      if (m_spec.momentum > 0.0) m_slot_names = {"momentum_buffer"};
      break;
    case OptimizerKind::adam:
    case OptimizerKind::adamw:
      m_slot_names = {"exp_avg", "exp_avg_sq"};
      break;
    case OptimizerKind::rmsprop:
      m_slot_names = {"square_avg"};
      if (m_spec.momentum > 0.0) m_slot_names.push_back("momentum_buffer");
      break;
  }
  for (const std::string& name : m_slot_names) {
    m_slots.push_back(Tensor::zeros(Shape{m_total}, m_device,
                                    fmt::format("optimizer {} state '{}' ({} parameters in {} tensors)", m_spec.type,
                                                name, m_total, m_segments.size())));
  }
}

int Optimizer::slot_index(const std::string& name) const {
  for (size_t i = 0; i < m_slot_names.size(); ++i) {
    if (m_slot_names[i] == name) return static_cast<int>(i);
  }
  return -1;
}

Tensor& Optimizer::slot(const std::string& name) {
  int i = slot_index(name);
  if (i < 0) {
    CNN_THROW("optimizer {} has no slot '{}' (slots: {}){}", m_spec.type, name,
              m_slot_names.empty() ? "none" : join_limited(m_slot_names), did_you_mean(name, m_slot_names));
  }
  return m_slots[static_cast<size_t>(i)];
}

const Tensor& Optimizer::slot(const std::string& name) const { return const_cast<Optimizer*>(this)->slot(name); }

void Optimizer::set_step_count(int64_t steps) {
  CNN_CHECK(steps >= 0, "optimizer: step count must be >= 0, got {}", steps);
  m_step_count = steps;
}

void Optimizer::step(const ExecContext& ctx, float* params, const float* grads, double lr) {
  CNN_CHECK(std::isfinite(lr) && lr >= 0.0, "optimizer {}: learning rate must be finite and >= 0, got {}",
            m_spec.type, lr);
  CNN_CHECK(m_total == 0 || (params != nullptr && grads != nullptr), "optimizer {}: null parameter or gradient buffer",
            m_spec.type);
  if (ctx.device != m_device) {
    CNN_THROW("optimizer {}: its slots live on the {} but the step got a {} context (make the optimizer on the "
              "device that holds the parameters)",
              m_spec.type, to_string(m_device), to_string(ctx.device));
  }
  if (m_device == Device::cuda)
    step_cuda(ctx, params, grads, lr);
  else
    step_cpu(ctx, params, grads, lr);
}

void Optimizer::step_cuda(const ExecContext& ctx, float* params, const float* grads, double lr) {
  if (!m_cuda_plan) {
    const std::vector<UpdateChunk> plan = make_update_plan(m_segments);
    m_cuda_plan_chunks = static_cast<int64_t>(plan.size());
    m_cuda_plan = upload_update_plan_cuda(ctx, plan);
  }
  ++m_step_count;
  const UpdateConstants decayed = update_constants(m_kind, m_spec, lr, m_spec.weight_decay, m_step_count);
  const UpdateConstants plain = update_constants(m_kind, m_spec, lr, 0.0, m_step_count);
  if (m_cuda_plan_chunks == 0) return;
  fused_update_cuda(ctx, decayed, plain, cuda_operands(params, grads));
}

StepConstants Optimizer::advance(double lr) {
  CNN_CHECK(std::isfinite(lr) && lr >= 0.0, "optimizer {}: learning rate must be finite and >= 0, got {}",
            m_spec.type, lr);
  ++m_step_count;
  StepConstants k;
  k.c[0] = update_constants(m_kind, m_spec, lr, 0.0, m_step_count);
  k.c[1] = update_constants(m_kind, m_spec, lr, m_spec.weight_decay, m_step_count);
  return k;
}

void Optimizer::step_from_device(const ExecContext& ctx, float* params, const float* grads,
                                 const StepConstants* dconsts, const float* guard) {
  CNN_CHECK(m_device == Device::cuda && ctx.device == Device::cuda,
            "optimizer {}: the device-constants step needs slots and context on the GPU", m_spec.type);
  CNN_CHECK(m_total == 0 || (params != nullptr && grads != nullptr && dconsts != nullptr),
            "optimizer {}: null parameter, gradient or constants buffer", m_spec.type);
  if (!m_cuda_plan) {
    const std::vector<UpdateChunk> plan = make_update_plan(m_segments);
    m_cuda_plan_chunks = static_cast<int64_t>(plan.size());
    m_cuda_plan = upload_update_plan_cuda(ctx, plan);
  }
  if (m_cuda_plan_chunks == 0) return;
  fused_update_cuda_device(ctx, m_kind, dconsts, guard, cuda_operands(params, grads));
}

UpdateOperands Optimizer::cuda_operands(float* params, const float* grads) {
  return UpdateOperands{static_cast<const UpdateChunk*>(m_cuda_plan.get()),
                        m_cuda_plan_chunks,
                        params,
                        grads,
                        m_slots.size() > 0 ? m_slots[0].data() : nullptr,
                        m_slots.size() > 1 ? m_slots[1].data() : nullptr};
}

std::vector<UpdateChunk> make_update_plan(const std::vector<ParamSegment>& segments) {
  std::vector<const ParamSegment*> by_offset;
  for (const ParamSegment& s : segments)
    if (s.count > 0) by_offset.push_back(&s);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const ParamSegment* a, const ParamSegment* b) { return a->offset < b->offset; });
  // Runs of touching segments with equal decay, then cut at multiples of kUpdateChunkElements.
  std::vector<UpdateChunk> plan;
  size_t i = 0;
  while (i < by_offset.size()) {
    const bool decay = by_offset[i]->decay;
    const int64_t begin = by_offset[i]->offset;
    int64_t end = begin + by_offset[i]->count;
    for (++i; i < by_offset.size() && by_offset[i]->offset == end && by_offset[i]->decay == decay; ++i)
      end += by_offset[i]->count;
    for (int64_t b = begin; b < end;) {
      const int64_t e = std::min(end, (b / kUpdateChunkElements + 1) * kUpdateChunkElements);
      plan.push_back(UpdateChunk{b, static_cast<int32_t>(e - b), decay ? 1 : 0});
      b = e;
    }
  }
  return plan;
}

void Optimizer::step_cpu(const ExecContext& ctx, float* params, const float* grads, double lr) {
  ++m_step_count;
  const OptimizerSpec& s = m_spec;
  const int threads = m_total >= kParallelMinElements ? ctx.threads() : 1;
  // Slot 0 and 1 (or a dummy when the optimizer has fewer slots; those loops never touch it).
  float* slot0 = m_slots.size() > 0 ? m_slots[0].data() : nullptr;
  float* slot1 = m_slots.size() > 1 ? m_slots[1].data() : nullptr;
  const OptimizerKind kind = m_kind;
  const int64_t t = m_step_count;

#pragma omp parallel num_threads(threads)
  {
    for (const ParamSegment& seg : m_segments) {
      const UpdateConstants k = update_constants(kind, s, lr, seg.decay ? s.weight_decay : 0.0, t);
      float* p = params + seg.offset;
      const float* g = grads + seg.offset;
      const int64_t n = seg.count;
      if (kind == OptimizerKind::sgd) {
        const SgdConstants c = k.sgd;
        float* buf = slot0 ? slot0 + seg.offset : nullptr;
#pragma omp for schedule(static) nowait
        for (int64_t i = 0; i < n; ++i) {
          float unused = 0.0f;
          sgd_update(p[i], g[i], buf ? buf[i] : unused, c);
        }
      } else if (kind == OptimizerKind::adam || kind == OptimizerKind::adamw) {
        const AdamConstants c = k.adam;
        float* m = slot0 + seg.offset;
        float* v = slot1 + seg.offset;
#pragma omp for schedule(static) nowait
        for (int64_t i = 0; i < n; ++i) adam_update(p[i], g[i], m[i], v[i], c);
      } else {
        const RmspropConstants c = k.rmsprop;
        float* sq = slot0 + seg.offset;
        float* buf = slot1 ? slot1 + seg.offset : nullptr;
#pragma omp for schedule(static) nowait
        for (int64_t i = 0; i < n; ++i) {
          float unused = 0.0f;
          rmsprop_update(p[i], g[i], sq[i], buf ? buf[i] : unused, c);
        }
      }
    }
  }
}

std::vector<std::pair<std::string, Tensor>> Optimizer::state_tensors() {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const ParamSegment& seg : m_segments) {
    Shape shape = seg.shape.rank() > 0 ? seg.shape : Shape{seg.count};
    for (size_t k = 0; k < m_slots.size(); ++k) {
      out.emplace_back("optim." + seg.name + "." + m_slot_names[k],
                       Tensor::wrap(m_slots[k].data() + seg.offset, shape, m_slots[k].device()));
    }
  }
  return out;
}

void Optimizer::load_state(const std::map<std::string, Tensor>& tensors) {
  std::vector<std::pair<std::string, Tensor>> expected = state_tensors();
  std::map<std::string, const Tensor*> wanted;
  for (const auto& [name, view] : expected) wanted[name] = &view;

  std::vector<std::string> missing, unexpected, mismatched;
  for (const auto& [name, view] : expected) {
    auto it = tensors.find(name);
    if (it == tensors.end()) {
      missing.push_back(name);
    } else if (it->second.shape() != view.shape()) {
      mismatched.push_back(fmt::format("{} (expected {}, got {})", name, view.shape().to_string(),
                                       it->second.shape().to_string()));
    }
  }
  for (const auto& [name, tensor] : tensors) {
    if (name.rfind("optim.", 0) == 0 && wanted.count(name) == 0) unexpected.push_back(name);
  }
  if (!missing.empty() || !unexpected.empty() || !mismatched.empty()) {
    std::string msg = fmt::format("optimizer {} state does not match the checkpoint:", m_spec.type);
    if (!missing.empty()) msg += fmt::format(" missing {}: {};", missing.size(), join_limited(missing));
    if (!unexpected.empty()) msg += fmt::format(" unexpected {}: {};", unexpected.size(), join_limited(unexpected));
    if (!mismatched.empty()) msg += fmt::format(" mismatched {}: {};", mismatched.size(), join_limited(mismatched));
    msg.pop_back();
    CNN_THROW("{}", msg);
  }
  for (auto& [name, view] : expected) view.copy_from(tensors.at(name));
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerSpec& spec, std::vector<ParamSegment> segments,
                                          int64_t total, Device device) {
  return std::make_unique<Optimizer>(spec, std::move(segments), total, device);
}

}  // namespace cnn
