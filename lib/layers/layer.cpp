// Layer base: backend choice, parameter binding and located errors.
#include "layers/layer.h"

#include "core/error.h"

namespace cnn {

Layer::Layer(const LayerSpec& spec)
    : m_name(spec.name),
      m_type(spec.type),
      m_path(spec.attrs.path().empty() ? "layers." + spec.name : spec.attrs.path()),
      m_where(spec.where),
      m_index(spec.index),
      m_attrs(spec.attrs),
      m_requested_backend(spec.backend),
      m_preferred_backend(spec.preferred_backend),
      m_precision(parse_precision(spec.precision)),
      m_math(math_mode(m_precision)) {}

bool Layer::can_run_on(Device device) const {
  const std::string& req = m_requested_backend;
  if (req != "auto" && !req.empty()) {
    const Backend b = parse_backend(req);
    return ((b == Backend::cpu) == (device == Device::cpu)) && supports(b);
  }
  if (device == Device::cpu) return supports(Backend::cpu);
  return supports(Backend::cuda) || supports(Backend::cudnn);
}

bool Layer::supports(Backend b) const {
  return m_dtype == DType::f32 && (b == Backend::cpu || (b == Backend::cuda && backend_built(b)));
}

void Layer::fail(const std::string& message) const {
  throw ConfigError(m_where, m_path,
                    fmt::format("layer '{}' ({}): {}", m_name, m_type, message));
}

void Layer::expect_rank(const Shape& s, int rank, const char* what) const {
  if (s.rank() != rank) fail(fmt::format("expects {} input of rank {}, got shape {}", what, rank, s.to_string()));
}

std::string Layer::choose_backend(Device device) {
  // train.backend (--backend): on a GPU, a layer left auto takes that backend where it supports it
  // (so `cuda` times our kernels alone); the others stay auto.
  if ((m_requested_backend == "auto" || m_requested_backend.empty()) && m_preferred_backend != "auto" &&
      device == Device::cuda && supports(parse_backend(m_preferred_backend))) {
    m_requested_backend = m_preferred_backend;
    m_backend_from_train = true;
  }
  const std::string& req = m_requested_backend;
  m_measure_backend = false;
  if (req == "auto" || req.empty()) {
    // On a GPU: the one GPU backend that supports the layer, or both measured by the autotuner.
    if (device == Device::cuda) {
      const bool cuda = supports(Backend::cuda), cudnn = supports(Backend::cudnn);
      if (!cuda && !cudnn) fail("no GPU implementation supports this layer's shapes (device is cuda)");
      m_backend = cuda ? Backend::cuda : Backend::cudnn;
      m_measure_backend = cuda && cudnn;
      m_backend_note = m_measure_backend ? "auto: to be measured (cuda vs cudnn)" : "auto: the only GPU backend";
      return "";
    }
    if (!supports(Backend::cpu)) fail("the CPU backend does not support this layer's shapes");
    m_backend = Backend::cpu;
    return "";
  }
  Backend b = parse_backend(req);
  bool on_device = (b == Backend::cpu) == (device == Device::cpu);
  if (!on_device) fail(fmt::format("backend '{}' was requested but the run's device is {}", req, to_string(device)));
  if (!supports(b)) fail(fmt::format("backend '{}' was requested but does not support this layer's shapes", req));
  m_backend = b;
  return "";
}

void Layer::set_backend(Backend b, std::string how) {
  m_backend = b;
  m_measure_backend = false;
  m_backend_note = std::move(how);
}

void Layer::bind(std::vector<Tensor> params, std::vector<Tensor> grads) {
  m_params = std::move(params);
  m_grads = std::move(grads);
}

}  // namespace cnn
