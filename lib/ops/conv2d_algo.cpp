// The convolution algorithm registry (see conv2d_algo.h) and the CPU provider.
// Trap: the lists are built once, on first use, from the three providers; a provider must not
// depend on a device being present (cuDNN's asks the library per shape in can_implement).
#include "ops/conv2d_algo.h"

#include <algorithm>
#include <array>
#include <climits>
#include <fmt/ranges.h>
#include <set>

#include "core/checked.h"
#include "core/error.h"

namespace cnn {

const char* to_string(ConvDir d) {
  switch (d) {
    case ConvDir::forward:
      return "forward";
    case ConvDir::backward_data:
      return "backward_data";
    case ConvDir::backward_filter:
      return "backward_filter";
  }
  return "?";
}

// conv2d_cpu.cpp's GEMMs take int sizes: every matrix dimension of one group must fit.
static bool cpu_can_implement(const ExecContext&, const Conv2dShape& sh) {
  if (sh.N < 1 || sh.C < 1 || sh.K < 1 || sh.P < 1 || sh.Q < 1 || sh.groups < 1) return false;
  if (sh.C % sh.groups != 0 || sh.K % sh.groups != 0) return false;
  const int64_t rows = sh.C / sh.groups * sh.R * sh.S, pq = sh.P * sh.Q;
  return rows <= INT_MAX && pq <= INT_MAX && sh.K <= INT_MAX && rows * pq <= INT_MAX;
}

// Mirrors conv2d_cpu.cpp: one column buffer per batch slice (none for a 1x1 stride-1 unpadded
// conv), plus one partial dw per slice after the first for backward_filter.
static size_t cpu_workspace_bytes(const ExecContext& ctx, const Conv2dShape& sh, ConvDir dir) {
  const bool pointwise = sh.R == 1 && sh.S == 1 && sh.stride_h == 1 && sh.stride_w == 1 && sh.pad_h == 0 &&
                         sh.pad_w == 0;
  const int64_t slices = std::max<int64_t>(1, std::min<int64_t>(ctx.threads(), sh.N));
  // Each factor is a size of one operand (within the tensor cap); the products are checked.
  const Checked cols = pointwise ? Checked(0) : Checked(sh.C / sh.groups * sh.R * sh.S) * (sh.P * sh.Q);
  Checked floats = cols * slices;
  if (dir == ConvDir::backward_filter) floats = floats + Checked(sh.weight_numel()) * (slices - 1);
  return checked_bytes(floats, sizeof(float), "conv2d cpu workspace");
}

std::vector<ConvAlgo> conv2d_cpu_algos() {
  std::vector<ConvAlgo> algos;
  for (ConvDir dir : {ConvDir::forward, ConvDir::backward_data, ConvDir::backward_filter}) {
    ConvAlgo a;
    a.name = "cpu:im2col_gemm";
    a.backend = Backend::cpu;
    a.dir = dir;
    a.deterministic = true;  // slices are summed in a fixed order
    a.can_implement = cpu_can_implement;
    a.workspace_bytes = [dir](const ExecContext& ctx, const Conv2dShape& sh) {
      return cpu_workspace_bytes(ctx, sh, dir);
    };
    switch (dir) {
      case ConvDir::forward:
        a.run = [](const ExecContext& ctx, const Conv2dShape& sh, const ConvOperands& op) {
          conv2d_forward_cpu(ctx, sh, op.x, op.w, op.b, op.y);
        };
        break;
      case ConvDir::backward_data:
        a.run = [](const ExecContext& ctx, const Conv2dShape& sh, const ConvOperands& op) {
          CNN_CHECK(op.dx, "conv2d cpu backward_data: dx is null");
          conv2d_backward_cpu(ctx, sh, nullptr, op.w, op.dy, op.dx, nullptr, nullptr);
        };
        break;
      case ConvDir::backward_filter:
        a.run = [](const ExecContext& ctx, const Conv2dShape& sh, const ConvOperands& op) {
          CNN_CHECK(op.dw, "conv2d cpu backward_filter: dw is null");
          conv2d_backward_cpu(ctx, sh, op.x, nullptr, op.dy, nullptr, op.dw, op.db);
        };
        break;
    }
    algos.push_back(std::move(a));
  }
  return algos;
}

static std::array<std::vector<ConvAlgo>, 3> build_registry() {
  std::array<std::vector<ConvAlgo>, 3> by_dir;
  for (auto provider : {conv2d_cpu_algos, conv2d_cuda_algos, conv2d_cudnn_algos}) {
    for (ConvAlgo& a : provider()) {
      auto& list = by_dir[size_t(a.dir)];
      for (const ConvAlgo& seen : list)
        CNN_CHECK(seen.name != a.name, "conv2d algorithm '{}' ({}) is registered twice", a.name, to_string(a.dir));
      CNN_CHECK(a.can_implement && a.workspace_bytes && a.run, "conv2d algorithm '{}' ({}) lacks a function",
                a.name, to_string(a.dir));
      list.push_back(std::move(a));
    }
  }
  return by_dir;
}

const std::vector<ConvAlgo>& conv2d_algos(ConvDir dir) {
  static const std::array<std::vector<ConvAlgo>, 3> registry = build_registry();
  return registry[size_t(dir)];
}

const ConvAlgo& conv2d_algo(ConvDir dir, const std::string& name) {
  const std::vector<ConvAlgo>& list = conv2d_algos(dir);
  for (const ConvAlgo& a : list)
    if (a.name == name) return a;
  std::vector<std::string> names;
  for (const ConvAlgo& a : list) names.push_back(a.name);
  CNN_THROW("unknown {} convolution algorithm '{}'{} (this build has: {})", to_string(dir), name,
            did_you_mean(name, names), names.empty() ? std::string("none") : fmt::format("{}", fmt::join(names, ", ")));
}

}  // namespace cnn
