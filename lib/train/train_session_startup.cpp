// The start-up breakdown of a training session (see startup_breakdown.h): the marks set-up and the
// loop leave on the process clock, and the report at the end of the segment. Trap: a mark reads
// the host clock only; the phases that queue device work end in a synchronisation of their own
// (autotuning, the upload, each step's loss read-back), so no mark adds one.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "core/cuda_context.h"
#include "core/process_clock.h"
#include "train/train_session.h"

namespace cnn {

static const char* kCpuRun = "CPU run";

void TrainSession::startup_begin() {
  const double tick = process_start_resolution();
  m_startup = StartupBreakdown(process_start_known()
                                   ? fmt::format("process start (/proc/self/stat, to within {:.3f} s)", tick / 2)
                                   : std::string("first static initialiser (the OS start time is unknown)"));
  m_startup.mark("exec, shared libraries (load, init)", process_static_init_seconds());
  for (const TrainOptions::StartupMark& m : m_opt.startup_marks) m_startup.mark(m.name, m.end_s);
  if (!m_dist) m_startup.absent("MPI init", "plain process");
}

std::optional<StartupPart> TrainSession::cudnn_handle_part() {
  if (m_cudnn_marked || !m_model->device().cuda()) return std::nullopt;
  const double s = m_model->device().cuda()->cudnn_handle_seconds();
  if (s < 0) return std::nullopt;
  m_cudnn_marked = true;
  return StartupPart{"cuDNN handle (first cuDNN call)", s, ""};
}

void TrainSession::startup_mark(const std::string& name, const std::string& note, std::vector<StartupPart> parts) {
  if (m_model && m_model->has_device())
    if (std::optional<StartupPart> cudnn = cudnn_handle_part()) parts.insert(parts.begin(), *cudnn);
  m_startup.mark(name, process_seconds(), note, parts);
}

void TrainSession::startup_device_mark() {
  const CudaContext* cuda = m_model->device().cuda();
  if (!cuda) {
    startup_mark("CPU context (threads, BLAS)", "",
                 {{"CUDA context creation", -1, kCpuRun}, {"CUDA stream", -1, kCpuRun},
                  {"cuBLAS handle and workspace", -1, kCpuRun}});
    m_startup.set_fact("CUDA module loading", "absent (CPU run)");
    return;
  }
  const CudaContext::Timings& t = cuda->timings();
  const std::string loading = CudaContext::module_loading();
  startup_mark("device set-up (backends, logs)", "",
               {{"CUDA context creation", t.context_s, loading == "eager" ? "every kernel module loaded here" : ""},
                {"CUDA stream", t.stream_s, ""},
                {"cuBLAS handle and workspace", t.cublas_s, ""}});
  m_startup.set_fact("CUDA module loading",
                     loading == "lazy" ? "lazy (each kernel at its first launch; CUDA_MODULE_LOADING=EAGER: all "
                                         "at context creation)"
                                       : loading + " (CUDA_MODULE_LOADING)");
}

void TrainSession::startup_autotune_mark(const AutotuneStats& s) {
  std::string note;
  if (s.cache_path.empty()) {
    note = fmt::format("no disk cache: {} decisions timed, {} untimed", s.timed, s.untimed);
  } else {
    const bool warm = s.timed == 0 && s.cache_hits > 0;
    note = fmt::format("cache {}: {} hits, {} timed (misses), {} untimed", warm ? "warm" : "cold", s.cache_hits,
                       s.timed, s.untimed);
  }
  m_startup.set_fact("autotune", nlohmann::json{{"cache", s.cache_path.empty() ? nlohmann::json(nullptr)
                                                                                : nlohmann::json(s.cache_path)},
                                                {"cache_entries_read", s.cache_entries},
                                                {"hits", s.cache_hits},
                                                {"timed", s.timed},
                                                {"untimed", s.untimed}});
  startup_mark("autotune", note);
}

void TrainSession::startup_loaders_mark() {
  const double up = m_data.gpu_upload_seconds();
  const char* why = m_device == Device::cpu ? kCpuRun : "images stay on the host";
  startup_mark("data loaders", "", {{"data upload to the GPU", up, up < 0 ? why : ""}});
}

void TrainSession::startup_data_marks() {
  startup_mark("waiting for the data");
  m_startup.beside("data load and decode (beside the device set-up)", m_data.load_start_s(),
                   m_data.load_end_s() - m_data.load_start_s(), "its own thread; the main line waited for it above");
}

// The first step on a GPU times each layer's forward and backward with the per-layer timer's CUDA
// events (no synchronisation: the events are read after the step). With lazy module loading a
// kernel's first launch blocks the host while its module loads, and the events around it take
// that wait: the slowest layers are the first step's parts.
void TrainSession::startup_before_step() {
  if (m_step != m_start_step || m_device != Device::cuda) return;
  m_first_step_layers = std::make_unique<PerLayerTimer>(ctx(), m_model->graph().size());
  m_model->executor().set_layer_timer(m_first_step_layers.get());
}

// The first step's slowest layers (forward and backward together), at most kShown of them, as
// parts of the phase; the note says what the other timed layers took.
static constexpr size_t kFirstStepLayersShown = 4;

std::vector<StartupPart> TrainSession::first_step_layer_parts(std::string& rest_note) {
  std::vector<StartupPart> parts;
  if (!m_first_step_layers) return parts;
  m_model->executor().set_layer_timer(nullptr);
  m_first_step_layers->collect();
  const Graph& g = m_model->graph();
  std::vector<std::pair<double, int>> took;  // seconds, node
  for (int i = 0; i < g.size(); ++i) {
    double ms = 0;
    for (double v : m_first_step_layers->forward_ms()[size_t(i)]) ms += v;
    for (double v : m_first_step_layers->backward_ms()[size_t(i)]) ms += v;
    if (ms > 0) took.push_back({ms / 1e3, i});
  }
  m_first_step_layers.reset();
  std::sort(took.begin(), took.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  double rest = 0;
  for (size_t k = 0; k < took.size(); ++k) {
    if (k >= kFirstStepLayersShown) {
      rest += took[k].first;
      continue;
    }
    const Layer& l = *g.node(took[k].second).layer;
    parts.push_back({fmt::format("first step: '{}' ({}), first launches", g.display_name(took[k].second), l.type()),
                     took[k].first, ""});
  }
  rest_note =
      took.size() > kFirstStepLayersShown
          ? fmt::format("the other {} layers {:.3f} s; then loss, optimizer, batch", took.size() - kFirstStepLayersShown, rest)
          : std::string("loss, optimizer, batch");
  return parts;
}

void TrainSession::startup_after_step() {
  const int64_t k = m_step - m_start_step;
  const TrainStep& step = m_model->step();
  const double before = m_startup.total_s();
  if (k == 1) {
    std::string rest;
    const std::vector<StartupPart> layers = first_step_layer_parts(rest);
    startup_mark("first step (uncaptured)", layers.empty() ? "" : rest, layers);
    m_startup.note_warmup_step(m_startup.total_s() - before);
    if (!step.cuda_graph_on()) {
      const std::string why = m_device == Device::cpu ? kCpuRun : "CUDA graph " + step.cuda_graph_status();
      m_startup.absent("CUDA graph capture", why);
      m_startup.absent("CUDA graph instantiation", why);
      m_startup.set_steady(2);
    }
    return;
  }
  const TrainStep::CaptureTimes& c = step.first_capture();
  std::vector<StartupPart> parts;
  if (c.capture_s >= 0) {
    parts = {{"CUDA graph capture", c.capture_s, ""},
             {"CUDA graph instantiation", c.instantiate_s, ""}};
  } else {
    const std::string why = "step uncaptured: CUDA graph " + step.cuda_graph_status();
    parts = {{"CUDA graph capture", -1, why}, {"CUDA graph instantiation", -1, why}};
  }
  startup_mark("second step (first replay)", "", parts);
  m_startup.note_warmup_step(m_startup.total_s() - before);
  m_startup.set_steady(3);
}

nlohmann::json TrainSession::startup_report() {
  if (rank() != 0) return nullptr;
  spdlog::info("{}", m_startup.table());
  return m_startup.to_json();
}

}  // namespace cnn
