// `cnn-bench conv` (see conv_bench.h).
#include "bench/conv_bench.h"

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <sstream>

#include "bench/conv_timebox.h"
#include "bench/peak.h"
#include "graph/timer.h"
#include "core/cuda_context.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/tensor.h"

namespace cnn {

bool glob_match(const std::string& p, const std::string& t) {
  size_t pi = 0, ti = 0, star = std::string::npos, mark = 0;
  while (ti < t.size()) {
    if (pi < p.size() && (p[pi] == '?' || p[pi] == t[ti])) {
      ++pi, ++ti;
    } else if (pi < p.size() && p[pi] == '*') {
      star = pi++, mark = ti;
    } else if (star != std::string::npos) {
      pi = star + 1, ti = ++mark;
    } else {
      return false;
    }
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

namespace {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The runnable candidates of one point and direction on a probe's operands.
class AlgoRunner final : public CandidateRunner {
public:
  AlgoRunner(const ExecContext& ctx, ConvProbe& probe, ConvDir d, std::vector<const ConvAlgo*> algos)
      : m_ctx(ctx), m_probe(probe), m_dir(d), m_algos(std::move(algos)), m_op(probe.operands(d)), m_timer(ctx),
        m_has_reference(probe.reference_name(d).has_value()), rel_err(m_algos.size(), -1) {}
  double run_ms(size_t i) override {
    m_timer.start();
    m_algos[i]->run(m_ctx, m_probe.shape(), m_op);
    return m_timer.stop_ms();
  }
  void before_timing(size_t) override { m_probe.poison(m_dir); }
  // What the last run left, against the reference on the same operands. An abandoned row has one
  // timed run: it is checked on operand set 0 alone (set 1 would cost another run).
  void after_timing(size_t i, CandidateTime& t) override {
    if (m_has_reference) rel_err[i] = t.abandoned() ? m_probe.output_error(m_dir) : m_probe.worst_error(*m_algos[i]);
  }
  double now_s() override { return steady_seconds(); }

private:
  const ExecContext& m_ctx;
  ConvProbe& m_probe;
  ConvDir m_dir;
  std::vector<const ConvAlgo*> m_algos;
  ConvOperands m_op;
  RegionTimer m_timer;
  bool m_has_reference;

public:
  std::vector<double> rel_err;
};

void summarise(const ConvBenchResult& out, size_t first, ConvBenchSummary& s) {
  for (size_t i = first; i < out.rows.size(); ++i) {
    const ConvBenchRow& r = out.rows[i];
    if (!r.may_win()) continue;
    const bool cudnn = r.impl.rfind("cudnn:", 0) == 0;
    std::string& name = cudnn ? s.best_cudnn : s.best_ours;
    double& ms = cudnn ? s.cudnn_ms : s.ours_ms;
    if (name.empty() || r.ms < ms) name = r.impl, ms = r.ms;
    if (!r.accurate()) continue;
    std::string& aname = cudnn ? s.accurate_cudnn : s.accurate_ours;
    double& ams = cudnn ? s.accurate_cudnn_ms : s.accurate_ours_ms;
    if (aname.empty() || r.ms < ams) aname = r.impl, ams = r.ms;
  }
  if (!s.best_ours.empty() && !s.best_cudnn.empty()) s.ratio = s.cudnn_ms / s.ours_ms;
  if (!s.accurate_ours.empty() && !s.accurate_cudnn.empty())
    s.accurate_ratio = s.accurate_cudnn_ms / s.accurate_ours_ms;
}

// The rows of one direction: every implementation, the runnable ones timed in the time box.
void bench_direction(const ExecContext& ctx, const ConvPoint& p, ConvDir d, const ConvBenchOptions& opt, double peak,
                     double point_start, std::unique_ptr<ConvProbe>& probe, ConvBenchResult& out) {
  const Conv2dShape& sh = p.shape;
  const size_t first = out.rows.size();
  std::vector<const ConvAlgo*> runnable;
  std::vector<size_t> runnable_rows;
  for (const ConvAlgo& a : conv2d_algos(d)) {
    if (!glob_match(opt.impl_glob, a.name) || a.dtype != DType::f32) continue;  // f32 probe operands
    if ((a.backend == Backend::cpu) != (ctx.device == Device::cpu)) continue;
    ConvBenchRow r;
    r.group = p.group, r.point = p.name, r.impl = a.name, r.direction = to_string(d), r.shape = sh;
    r.math = a.math_used(opt.math);
    r.tolerance = r.math == MathMode::fp32 || opt.tolerance_given ? opt.tolerance : conv_tolerance(r.math);
    if (!a.can_implement(ctx, sh, opt.math)) {
      r.status = "cannot implement";
    } else {
      r.workspace_bytes = a.workspace_bytes(ctx, sh, opt.math);
      if (r.workspace_bytes > opt.workspace_limit_bytes) r.status = "workspace over limit";
      else runnable.push_back(&a), runnable_rows.push_back(out.rows.size());
    }
    out.rows.push_back(r);
  }
  TimeBox box;
  box.warmup = opt.warmup >= 0 ? opt.warmup : p.warmup;
  box.repeats = opt.repeats > 0 ? opt.repeats : p.repeats;
  box.cutoff = opt.cutoff, box.max_seconds_per_point = opt.max_seconds_per_point, box.spread = opt.spread;
  std::vector<CandidateTime> times(runnable.size());
  std::vector<double> rel_err(runnable.size(), -1);
  try {
    if (!runnable.empty() && !probe) {
      probe = std::make_unique<ConvProbe>(ctx, sh);
      probe->set_math(opt.math);
    }
    if (!runnable.empty()) {
      AlgoRunner runner(ctx, *probe, d, runnable);
      times = time_candidates(runnable.size(), box, runner, point_start);
      rel_err = runner.rel_err;
    }
  } catch (const std::exception& e) {  // the probe's operands: every candidate fails alike
    for (CandidateTime& t : times) t.status = std::string("failed: ") + e.what();
  }
  for (size_t j = 0; j < runnable.size(); ++j) {
    ConvBenchRow& r = out.rows[runnable_rows[j]];
    const CandidateTime& t = times[j];
    r.status = t.status, r.runs = t.runs, r.wall_s = t.wall_s;
    if (!t.timed()) {
      spdlog::warn("{} {} {}: {}", p.name, to_string(d), r.impl, t.status);
      continue;
    }
    r.ms = t.ms, r.rel_err = rel_err[j];
    r.tflops = sh.flops_forward() / (r.ms * 1e-3) / 1e12;
    r.peak_share = peak > 0 ? r.tflops / peak : 0;
  }
  ConvBenchSummary s;
  s.group = p.group, s.point = p.name, s.direction = to_string(d);
  ConvBenchRow* best = nullptr;
  for (size_t i = first; i < out.rows.size(); ++i)
    if (out.rows[i].may_win() && (!best || out.rows[i].ms < best->ms)) best = &out.rows[i];
  if (best) best->fastest = true;
  summarise(out, first, s);
  out.summaries.push_back(s);
}

// Where an earlier point measured a (shape, direction): its point name, rows and summary.
struct Measured {
  std::string point;
  size_t first_row, end_row, summary;
};

void bench_point(const ExecContext& ctx, const ConvPoint& p, const ConvBenchOptions& opt, double peak,
                 std::map<std::string, Measured>& measured, ConvBenchResult& out) {
  const double start = steady_seconds();
  std::unique_ptr<ConvProbe> probe;  // operands, allocated on first use
  bool timed = false, copied = false;
  for (ConvDir d : p.directions) {
    if (opt.direction != "all" && opt.direction != to_string(d)) continue;
    if (opt.done.count({p.name, to_string(d)})) {
      ++out.pairs_skipped;
      continue;
    }
    const std::string key = p.shape.to_string() + " " + to_string(d);
    if (auto it = measured.find(key); opt.dedupe && it != measured.end()) {
      const Measured m = it->second;
      for (size_t i = m.first_row; i < m.end_row; ++i) {
        ConvBenchRow r = out.rows[i];
        r.group = p.group, r.point = p.name, r.copy_of = m.point, r.wall_s = 0;
        out.rows.push_back(r);
      }
      ConvBenchSummary s = out.summaries[m.summary];
      s.group = p.group, s.point = p.name;
      out.summaries.push_back(s);
      copied = true;
      continue;
    }
    const size_t first = out.rows.size();
    bench_direction(ctx, p, d, opt, peak, start, probe, out);
    measured[key] = Measured{p.name, first, out.rows.size(), out.summaries.size() - 1};
    timed = true;
  }
  out.points_timed += timed;
  out.points_copied += copied && !timed;
  spdlog::info("{}: {:.2f} s", p.name, steady_seconds() - start);
}

}  // namespace

ConvBenchResult bench_conv(const std::vector<ConvPoint>& points, const ConvBenchOptions& opt) {
  const bool gpu = opt.device == "cuda" || (opt.device == "auto" && cuda_available());
  if (opt.device != "auto" && opt.device != "cpu" && opt.device != "cuda")
    throw ConfigError({"--device"}, "device", fmt::format("expected auto, cpu or cuda, found '{}'", opt.device));
  const double start = steady_seconds();
  std::unique_ptr<CudaContext> cuda;
  ExecContext cpu;
  const ExecContext* ctx = nullptr;
  ConvBenchResult out;
  out.tolerance = opt.tolerance;
  out.precision = to_string(opt.math);
  if (gpu) {
    cuda = std::make_unique<CudaContext>(0);
    cuda->ctx().workspace_limit_bytes = opt.workspace_limit_bytes;
    ctx = &cuda->ctx();
    out.device = "cuda: " + cuda_device_description();
    const PeakFigures peak = measure_peak(*ctx);
    out.peak_tflops = peak.fp32_tflops, out.peak_gb_per_s = peak.dram_gb_per_s;
  } else {
    cpu = ExecContext::cpu();
    cpu.workspace_limit_bytes = opt.workspace_limit_bytes;
    ctx = &cpu;
    out.device = fmt::format("cpu: {} threads", cpu.threads());
  }
  std::map<std::string, Measured> measured;  // (shape, direction) -> where it was timed
  for (const ConvPoint& p : points) {
    if (opt.max_seconds > 0 && steady_seconds() - start >= opt.max_seconds) {
      out.not_run.push_back(p.name);
      continue;
    }
    spdlog::info("{} ({})", p.name, p.shape.to_string());
    const size_t first = out.rows.size();
    bench_point(*ctx, p, opt, out.peak_tflops, measured, out);
    if (opt.on_rows && out.rows.size() > first) opt.on_rows(out, first);
  }
  auto geomeans = [&](double ConvBenchSummary::*ratio) {
    std::map<std::string, std::pair<double, int>> logs;  // group -> (sum of log ratio, count)
    std::vector<std::string> order;
    for (const ConvBenchSummary& s : out.summaries) {
      if (s.*ratio <= 0) continue;
      if (!logs.count(s.group)) order.push_back(s.group);
      logs[s.group].first += std::log(s.*ratio);
      logs[s.group].second += 1;
    }
    std::vector<std::pair<std::string, double>> means;
    for (const std::string& g : order) means.emplace_back(g, std::exp(logs[g].first / logs[g].second));
    return means;
  };
  out.group_geomean = geomeans(&ConvBenchSummary::ratio);
  out.group_geomean_accurate = geomeans(&ConvBenchSummary::accurate_ratio);
  out.wall_s = steady_seconds() - start;
  return out;
}

std::string ConvBenchResult::to_table() const {
  std::string s = fmt::format("device: {}\n", device);
  if (peak_tflops > 0)
    s += fmt::format("measured peak: {:.1f} TFLOP/s FP32, {:.0f} GB/s DRAM\n", peak_tflops, peak_gb_per_s);
  else
    s += "measured peak: not measured on the CPU (peak share column left 0)\n";
  s += fmt::format("precision {}; rel_err: relative L2 difference from the reference on the same operands; accurate: "
                   "<= {:.0e}{}\n",
                   precision, tolerance,
                   precision == "tf32" ? fmt::format(" ({:.0e} for rows marked tf32)", conv_tolerance(MathMode::tf32))
                                       : std::string());
  s += fmt::format("{:<24} {:<16} {:<26} {:>4} {:>10} {:>8} {:>6} {:>10} {:>8} {:>4}  {}\n", "point", "direction",
                   "impl", "math", "ms", "TFLOP/s", "peak", "ws MiB", "rel_err", "runs", "status");
  for (const ConvBenchRow& r : rows)
    s += fmt::format("{:<24} {:<16} {:<26} {:>4} {:>10.4f} {:>8.2f} {:>5.0f}% {:>10.1f} {:>8} {:>4}  {}{}{}{}\n", r.point,
                     r.direction, r.impl, to_string(r.math), r.ms, r.tflops, 100 * r.peak_share,
                     double(r.workspace_bytes) / (1 << 20),
                     r.rel_err >= 0 ? fmt::format("{:.1e}", r.rel_err) : std::string(r.rel_err < 0 ? "-" : "nan"),
                     r.runs, r.status, r.fastest ? " (fastest)" : "",
                     r.may_win() && !r.accurate() && r.rel_err != -1 ? " (inaccurate)" : "",
                     r.copy_of.empty() ? "" : " (as " + r.copy_of + ")");
  s += "\nbest of ours vs best of cuDNN (ratio = cuDNN ms / ours ms; > 1: ours faster)\n";
  for (const ConvBenchSummary& x : summaries)
    s += fmt::format("{:<24} {:<16} ours {} {:.4f} ms, cudnn {} {:.4f} ms, ratio {}\n", x.point, x.direction,
                     x.best_ours.empty() ? "-" : x.best_ours, x.ours_ms, x.best_cudnn.empty() ? "-" : x.best_cudnn,
                     x.cudnn_ms, x.ratio > 0 ? fmt::format("{:.3f}", x.ratio) : std::string("n/a"));
  s += fmt::format("\nbest accurate (rel_err <= {:.0e}) of ours vs of cuDNN\n", tolerance);
  for (const ConvBenchSummary& x : summaries)
    s += fmt::format("{:<24} {:<16} ours {} {:.4f} ms, cudnn {} {:.4f} ms, ratio {}\n", x.point, x.direction,
                     x.accurate_ours.empty() ? "-" : x.accurate_ours, x.accurate_ours_ms,
                     x.accurate_cudnn.empty() ? "-" : x.accurate_cudnn, x.accurate_cudnn_ms,
                     x.accurate_ratio > 0 ? fmt::format("{:.3f}", x.accurate_ratio) : std::string("n/a"));
  s += "\ngeometric mean of the ratio per group (all; accurate only)\n";
  for (const auto& [g, v] : group_geomean) {
    std::string acc = "n/a";
    for (const auto& [ga, va] : group_geomean_accurate)
      if (ga == g) acc = fmt::format("{:.3f}", va);
    s += fmt::format("{:<24} {:.3f}; {}\n", g, v, acc);
  }
  if (group_geomean.empty()) s += "(none: no point had both an implementation of ours and of cuDNN)\n";
  s += fmt::format("\nwall {:.1f} s: {} points timed, {} copied from an earlier point of the same shape, {} "
                   "(point, direction) pairs already in the CSV\n",
                   wall_s, points_timed, points_copied, pairs_skipped);
  if (!not_run.empty())
    s += fmt::format("incomplete: {} points not run (--max-seconds): {}\n", not_run.size(), fmt::join(not_run, " "));
  return s;
}

std::string ConvBenchResult::csv_header() {
  return "group,layer,impl,direction,ms,tflops,peak_share,workspace_bytes,fastest,status,precision,N,C,H,W,K,R,S,"
         "stride,padding,rel_err,runs,wall_s,copy_of\n";
}

std::string ConvBenchResult::csv_rows(size_t first_row) const {
  std::string s;
  for (size_t i = first_row; i < rows.size(); ++i) {
    const ConvBenchRow& r = rows[i];
    const Conv2dShape& h = r.shape;
    const bool t = r.has_time();
    std::string status = r.status;
    for (char& c : status)
      if (c == ',' || c == '\n' || c == '"') c = ' ';
    s += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", r.group, r.point,
                     r.impl, r.direction, t ? fmt::format("{:.6g}", r.ms) : "", t ? fmt::format("{:.6g}", r.tflops) : "",
                     t ? fmt::format("{:.4g}", r.peak_share) : "", r.workspace_bytes, r.fastest ? 1 : 0, status,
                     to_string(r.math), h.N, h.C, h.H, h.W, h.K, h.R, h.S, h.stride_h, h.pad_h,
                     t && r.rel_err != -1 ? fmt::format("{:.3g}", r.rel_err) : "", r.runs,
                     fmt::format("{:.3g}", r.wall_s), r.copy_of);
  }
  return s;
}

std::string ConvBenchResult::to_csv() const { return csv_header() + csv_rows(0); }

std::set<std::pair<std::string, std::string>> conv_csv_pairs(const std::string& text, const std::string& what) {
  std::istringstream in(text);
  std::string header, line;
  std::getline(in, header);
  if (header + "\n" != ConvBenchResult::csv_header())
    throw ConfigError({what}, "", fmt::format("expected a CSV written by `cnn-bench conv --csv` (header '{}'), found "
                                              "header '{}'",
                                              ConvBenchResult::csv_header().substr(0, 40) + "...", header));
  std::set<std::pair<std::string, std::string>> pairs;
  for (int n = 2; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    std::vector<std::string> f;
    std::istringstream cells(line);
    for (std::string c; std::getline(cells, c, ',');) f.push_back(c);
    if (f.size() < 4) throw ConfigError({what, n, 0}, "", fmt::format("expected 24 columns, found {}", f.size()));
    pairs.emplace(f[1], f[3]);
  }
  return pairs;
}

nlohmann::json ConvBenchResult::to_json() const {
  nlohmann::json j{{"device", device},
                   {"precision", precision},
                   {"peak_tflops", peak_tflops},
                   {"peak_gb_per_s", peak_gb_per_s}};
  j["rows"] = nlohmann::json::array();
  for (const ConvBenchRow& r : rows) {
    const Conv2dShape& h = r.shape;
    j["rows"].push_back({{"group", r.group}, {"layer", r.point}, {"impl", r.impl}, {"direction", r.direction},
                         {"status", r.status}, {"ms", r.ms}, {"tflops", r.tflops}, {"peak_share", r.peak_share},
                         {"workspace_bytes", r.workspace_bytes}, {"fastest", r.fastest},
                         {"rel_err", r.rel_err != -1 ? nlohmann::json(r.rel_err) : nlohmann::json(nullptr)},
                         {"precision", to_string(r.math)}, {"tolerance", r.tolerance}, {"runs", r.runs},
                         {"wall_s", r.wall_s}, {"copy_of", r.copy_of},
                         {"shape", {{"N", h.N}, {"C", h.C}, {"H", h.H}, {"W", h.W}, {"K", h.K}, {"R", h.R},
                                    {"S", h.S}, {"stride", h.stride_h}, {"padding", h.pad_h}}}});
  }
  j["summaries"] = nlohmann::json::array();
  for (const ConvBenchSummary& x : summaries)
    j["summaries"].push_back({{"group", x.group}, {"layer", x.point}, {"direction", x.direction},
                              {"best_ours", x.best_ours}, {"ours_ms", x.ours_ms}, {"best_cudnn", x.best_cudnn},
                              {"cudnn_ms", x.cudnn_ms}, {"ratio", x.ratio}, {"accurate_ours", x.accurate_ours},
                              {"accurate_ours_ms", x.accurate_ours_ms}, {"accurate_cudnn", x.accurate_cudnn},
                              {"accurate_cudnn_ms", x.accurate_cudnn_ms}, {"accurate_ratio", x.accurate_ratio}});
  j["group_geomean"] = nlohmann::json::object();
  for (const auto& [g, v] : group_geomean) j["group_geomean"][g] = v;
  j["tolerance"] = tolerance;
  j["group_geomean_accurate"] = nlohmann::json::object();
  for (const auto& [g, v] : group_geomean_accurate) j["group_geomean_accurate"][g] = v;
  j["wall_s"] = wall_s;
  j["not_run"] = not_run;
  return j;
}

}  // namespace cnn
