// `cnn-train doctor` (see doctor.h): each rank describes itself as "key=value" lines, everyone
// gathers them, and the all-reduce probe times the communicator the trainer would use.
#include "dist/doctor.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <sstream>

#include "core/cuda_context.h"
#include "core/error.h"
#include "core/tensor.h"
#include "dist/gpu_info.h"

namespace cnn {

namespace {

using Fields = std::vector<std::pair<std::string, std::string>>;

std::string encode(const Fields& f) {
  std::string s;
  for (const auto& [k, v] : f) s += k + "=" + v + "\n";
  return s;
}

std::map<std::string, std::string> decode(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    size_t eq = line.find('=');
    if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return out;
}

// "0-3, 5" from sorted ranks.
std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    s += (s.empty() ? "" : ", ") + (j > i ? fmt::format("{}-{}", ranks[i], ranks[j]) : std::to_string(ranks[i]));
    i = j + 1;
  }
  return s;
}

// Seconds per all-reduce of `floats` floats on `where`, the slowest rank's (all ranks return it).
double probe_allreduce(Communicator& comm, float* data, int64_t floats, Device where, int iterations) {
  comm.allreduce_sum(data, floats, where);  // warm-up: connections, NCCL channels
  comm.barrier();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) comm.allreduce_sum(data, floats, where);
  float seconds = float(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iterations);
  std::vector<std::string> all = comm.allgather(fmt::format("{:.9g}", seconds));
  double worst = 0;
  for (const auto& s : all) worst = std::max(worst, std::stod(s));
  return worst;
}

}  // namespace

DoctorReport run_doctor(Communicator& host, const DoctorOptions& opt) {
  CNN_CHECK(opt.size_mb > 0 && opt.iterations >= 1, "doctor: size {} MiB, {} iterations", opt.size_mb, opt.iterations);
  if (opt.device != "auto" && opt.device != "cpu" && opt.device != "cuda")
    throw ConfigError({"--device"}, "", fmt::format("expected auto, cpu or cuda, found '{}'", opt.device));
  const int gpus = cuda_device_count();
  if (opt.device == "cuda" && gpus == 0)
    throw ConfigError({"--device"}, "", "cuda requested but " + cuda_device_description());
  Device where = (opt.device == "cuda" || (opt.device == "auto" && gpus > 0)) ? Device::cuda : Device::cpu;
  check_same_on_all_ranks(host, "the probe's devices (use --device)", to_string(where));

  std::unique_ptr<CudaContext> cuda;
  std::unique_ptr<Communicator> device_comm;
  Fields f{{"host", host.host()}, {"local rank", fmt::format("{} of {}", host.local_rank(), host.local_size())}};
  if (where == Device::cuda) {
    const int gpu = local_gpu_index(host.local_rank());
    cuda = std::make_unique<CudaContext>(gpu);
    device_comm = make_device_communicator(host, cuda->ctx());
    f.emplace_back("GPU", cuda_device_description());
  } else {
    f.emplace_back("GPU", gpus ? fmt::format("{} visible, not used (--device cpu)", gpus) : cuda_device_description());
  }
  Communicator& comm = device_comm ? *device_comm : host;
  CudaVersions v = cuda_versions();
  f.emplace_back("CUDA runtime", v.runtime);
  f.emplace_back("CUDA driver", v.driver);
  f.emplace_back("cuDNN", v.cudnn);
  std::map<std::string, std::string> libs;
  for (const auto& [k, val] : comm.versions()) libs[k] = val;
  const std::string nccl = nccl_version();
  f.emplace_back("NCCL", nccl.empty()         ? "not in this build"
                         : libs.count("NCCL") ? nccl
                                              : nccl + " (loaded, not used by this run)");
  f.emplace_back("MPI",
                 libs.count("MPI") ? libs["MPI"] : (build_has_mpi() ? "not used (no launcher)" : "not in this build"));
  f.emplace_back("communicator", comm.kind());

  std::vector<std::string> all = comm.allgather(encode(f));
  std::vector<std::map<std::string, std::string>> ranks;
  for (const auto& s : all) ranks.push_back(decode(s));

  DoctorReport rep;
  std::string& t = rep.text;
  t += fmt::format("{} rank{} ({} communicator)\n", comm.size(), comm.size() == 1 ? "" : "s", comm.kind());
  for (size_t r = 0; r < ranks.size(); ++r) {
    t += fmt::format("rank {}:\n", r);
    for (const auto& [k, unused] : f) t += fmt::format("  {:<13} {}\n", k, ranks[r][k]);
  }
  for (const char* key : {"CUDA runtime", "CUDA driver", "cuDNN", "NCCL", "MPI", "communicator"}) {
    std::map<std::string, std::vector<int>> groups;
    for (size_t r = 0; r < ranks.size(); ++r) groups[ranks[r][key]].push_back(int(r));
    if (groups.size() <= 1) continue;
    std::string line = std::string(key) + ": ";
    bool first = true;
    for (const auto& [value, rs] : groups) {
      std::string hosts;
      for (int r : rs)
        if (hosts.find(ranks[size_t(r)]["host"]) == std::string::npos)
          hosts += (hosts.empty() ? "" : ", ") + ranks[size_t(r)]["host"];
      line += fmt::format("{}{} on rank{} {} ({})", first ? "" : "; ", value, rs.size() > 1 ? "s" : "", rank_list(rs),
                          hosts);
      first = false;
    }
    rep.mismatches.push_back(line);
  }

  if (!comm.distributed()) {
    t += "all-reduce probe: skipped (a single process not started by a launcher does no communication)\n";
  } else {
    const int64_t floats = std::max<int64_t>(1, int64_t(opt.size_mb * 1048576.0 / sizeof(float)));
    Tensor buf = Tensor::zeros(Shape{floats}, where, "all-reduce probe");
    const double s = probe_allreduce(comm, buf.data(), floats, where, opt.iterations);
    const double bytes = double(floats) * sizeof(float), world = comm.size();
    const double algbw = bytes / s / 1e9, busbw = algbw * 2.0 * (world - 1) / world;
    t += fmt::format(
        "all-reduce probe ({}, {:.0f} MiB of float on {}, {} iterations): {:.3f} ms, algorithm bandwidth {:.2f} GB/s, "
        "bus bandwidth {:.2f} GB/s\n",
        comm.kind(), bytes / 1048576.0, to_string(where), opt.iterations, s * 1e3, algbw, busbw);
  }
  if (rep.mismatches.empty()) {
    t += "versions: the same on every rank\n";
  } else {
    for (const auto& m : rep.mismatches) t += "MISMATCH " + m + "\n";
  }
  return rep;
}

}  // namespace cnn
