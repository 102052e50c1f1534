// `cnn-bench conv` (see conv_bench.h).
#include "bench/conv_bench.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <map>
#include <memory>

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

void bench_point(const ExecContext& ctx, const ConvPoint& p, const ConvBenchOptions& opt, double peak,
                 ConvBenchResult& out) {
  const Conv2dShape& sh = p.shape;
  const Device dev = ctx.device;
  std::unique_ptr<ConvProbe> probe;  // operands, allocated on first use
  for (ConvDir d : p.directions) {
    if (opt.direction != "all" && opt.direction != to_string(d)) continue;
    const size_t first = out.rows.size();
    for (const ConvAlgo& a : conv2d_algos(d)) {
      if (!glob_match(opt.impl_glob, a.name) || a.dtype != DType::f32) continue;  // f32 probe operands
      if ((a.backend == Backend::cpu) != (dev == Device::cpu)) continue;
      if (a.dtype != DType::f32) continue;  // the probe's operands are f32 (bf16 rows: the autotuner times them)
      ConvBenchRow r;
      r.group = p.group, r.point = p.name, r.impl = a.name, r.direction = to_string(d), r.shape = sh;
      r.math = a.math_used(opt.math);
      r.tolerance = r.math == MathMode::fp32 || opt.tolerance_given ? opt.tolerance : conv_tolerance(r.math);
      if (!a.can_implement(ctx, sh, opt.math)) {
        r.status = "cannot implement";
        out.rows.push_back(r);
        continue;
      }
      r.workspace_bytes = a.workspace_bytes(ctx, sh, opt.math);
      if (r.workspace_bytes > opt.workspace_limit_bytes) {
        r.status = "workspace over limit";
        out.rows.push_back(r);
        continue;
      }
      try {
        if (!probe) {
          probe = std::make_unique<ConvProbe>(ctx, sh);
          probe->set_math(opt.math);
        }
        const ConvOperands op = probe->operands(d);
        const int warmup = opt.warmup >= 0 ? opt.warmup : p.warmup, repeats = opt.repeats > 0 ? opt.repeats : p.repeats;
        probe->poison(d);
        r.ms = median_ms(ctx, warmup, repeats, [&] { a.run(ctx, sh, op); });
        // What the timed runs left, against the reference on the same operands.
        if (probe->reference_name(d)) r.rel_err = probe->worst_error(a);
        r.tflops = sh.flops_forward() / (r.ms * 1e-3) / 1e12;
        r.peak_share = peak > 0 ? r.tflops / peak : 0;
      } catch (const std::exception& e) {
        r.status = std::string("failed: ") + e.what();
        spdlog::warn("{} {} {}: {}", p.name, to_string(d), a.name, e.what());
      }
      out.rows.push_back(r);
    }
    ConvBenchSummary s;
    s.group = p.group, s.point = p.name, s.direction = to_string(d);
    ConvBenchRow* best = nullptr;
    for (size_t i = first; i < out.rows.size(); ++i) {
      ConvBenchRow& r = out.rows[i];
      if (r.status != "ok") continue;
      if (!best || r.ms < best->ms) best = &r;
      const bool cudnn = r.impl.rfind("cudnn:", 0) == 0;
      std::string& name = cudnn ? s.best_cudnn : s.best_ours;
      double& ms = cudnn ? s.cudnn_ms : s.ours_ms;
      if (name.empty() || r.ms < ms) name = r.impl, ms = r.ms;
      if (!r.accurate()) continue;
      std::string& aname = cudnn ? s.accurate_cudnn : s.accurate_ours;
      double& ams = cudnn ? s.accurate_cudnn_ms : s.accurate_ours_ms;
      if (aname.empty() || r.ms < ams) aname = r.impl, ams = r.ms;
    }
    if (best) best->fastest = true;
    if (!s.best_ours.empty() && !s.best_cudnn.empty()) s.ratio = s.cudnn_ms / s.ours_ms;
    if (!s.accurate_ours.empty() && !s.accurate_cudnn.empty())
      s.accurate_ratio = s.accurate_cudnn_ms / s.accurate_ours_ms;
    out.summaries.push_back(s);
  }
}

}  // namespace

ConvBenchResult bench_conv(const std::vector<ConvPoint>& points, const ConvBenchOptions& opt) {
  const bool gpu = opt.device == "cuda" || (opt.device == "auto" && cuda_available());
  if (opt.device != "auto" && opt.device != "cpu" && opt.device != "cuda")
    throw ConfigError({"--device"}, "device", fmt::format("expected auto, cpu or cuda, found '{}'", opt.device));
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
  for (const ConvPoint& p : points) {
    spdlog::info("{} ({})", p.name, p.shape.to_string());
    bench_point(*ctx, p, opt, out.peak_tflops, out);
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
  s += fmt::format("{:<24} {:<16} {:<26} {:>4} {:>10} {:>8} {:>6} {:>10} {:>8}  {}\n", "point", "direction", "impl",
                   "math", "ms", "TFLOP/s", "peak", "ws MiB", "rel_err", "status");
  for (const ConvBenchRow& r : rows)
    s += fmt::format("{:<24} {:<16} {:<26} {:>4} {:>10.4f} {:>8.2f} {:>5.0f}% {:>10.1f} {:>8}  {}{}{}\n", r.point,
                     r.direction, r.impl, to_string(r.math), r.ms, r.tflops, 100 * r.peak_share,
                     double(r.workspace_bytes) / (1 << 20),
                     r.rel_err >= 0 ? fmt::format("{:.1e}", r.rel_err) : std::string(r.rel_err < 0 ? "-" : "nan"),
                     r.status, r.fastest ? " (fastest)" : "",
                     r.status == "ok" && !r.accurate() && r.rel_err != -1 ? " (inaccurate)" : "");
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
  return s;
}

std::string ConvBenchResult::to_csv() const {
  std::string s = "group,layer,impl,direction,ms,tflops,peak_share,workspace_bytes,fastest,status,precision,N,C,H,W,K,"
                  "R,S,stride,padding,rel_err\n";
  for (const ConvBenchRow& r : rows) {
    const Conv2dShape& h = r.shape;
    const bool ok = r.status == "ok";
    std::string status = r.status;
    for (char& c : status)
      if (c == ',' || c == '\n' || c == '"') c = ' ';
    s += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", r.group, r.point, r.impl,
                     r.direction, ok ? fmt::format("{:.6g}", r.ms) : "", ok ? fmt::format("{:.6g}", r.tflops) : "",
                     ok ? fmt::format("{:.4g}", r.peak_share) : "", r.workspace_bytes, r.fastest ? 1 : 0, status,
                     to_string(r.math), h.N, h.C, h.H, h.W, h.K, h.R, h.S, h.stride_h, h.pad_h,
                     ok && r.rel_err != -1 ? fmt::format("{:.3g}", r.rel_err) : "");
  }
  return s;
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
                         {"precision", to_string(r.math)}, {"tolerance", r.tolerance},
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
  return j;
}

}  // namespace cnn
