// cnn-bf16-conv-bench: our BF16 tensor-core convolutions, NCHW (lib/ops/conv2d_igemm_bf16.h) and
// NHWC (lib/ops/conv2d_igemm_nhwc_bf16.h), on the conv layers of models/vgg_fer.yaml (batch 64,
// 640, 256) and models/mini_xception.yaml (32, 256), each direction: checked against our FP32 CUDA
// convolution run on the same bf16-rounded inputs (relative L2 error; outputs poisoned with NaN
// first), then timed (CUDA events, median, inputs rotated over copies when one set fits in L2)
// beside cuDNN in BF16 (NCHW and NHWC), FP32 and TF32, each with the fastest algorithm
// cudnnFind*Ex reports. Starts with the BF16 peak of a plain cuBLAS GEMM (8192^3). Stops starting
// layers after --seconds; prints every row, then a summary (model totals, NCHW against NHWC, rates
// of the largest layers against the peak and cuDNN NHWC, checks).
// Depthwise and C == 1 layers run our direct BF16 kernels (conv2d_direct_bf16.h,
// conv2d_direct_nhwc_bf16.h). The NHWC weights are packed from the FP32 master beforehand
// (krsc, crsk, rsk: conv2d_weights_bf16.h), once per weight update in training, so not timed.
// The direct NHWC kernels are also timed by name where the row-walking ones take the shape
// (--plans-csv lists them: direct-pixels, direct-rows, and direct, the automatic pick).
// Trap: cuDNN's BF16 filter gradient is BF16 while ours is FP32 (what the master weights need),
// and our NHWC filter gradient computes db in the same kernel (cuDNN's time leaves db out).
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bf16_conv_bench_util.cuh"
#include "core/cuda_context.h"
#include "ops/conv2d_direct_bf16.h"
#include "ops/conv2d_direct_nhwc_bf16.h"
#include "ops/conv2d_igemm_bf16.h"
#include "ops/conv2d_igemm_nhwc_bf16.h"
#include "ops/conv2d_weights_bf16.h"

namespace {

using namespace cnn;
using namespace cnn::bench_bf16;

// ---- the layers ----
struct Layer {
  std::string model, name;
  int batch;
  Conv2dShape sh;
};

std::vector<Layer> layers() {
  struct Def {
    const char* name;
    int C, H, K, R, stride, pad;
    bool bias;
    int groups = 1;
  };
  // vgg_fer trains on 40x40 crops; mini_xception on 48x48 (`cnn-train validate` lists both).
  const Def vgg[] = {{"conv1a", 1, 40, 64, 3, 1, 1, true},    {"conv1b", 64, 40, 64, 3, 1, 1, true},
                     {"conv2a", 64, 20, 128, 3, 1, 1, true},  {"conv2b", 128, 20, 128, 3, 1, 1, true},
                     {"conv3a", 128, 10, 256, 3, 1, 1, true}, {"conv3b", 256, 10, 256, 3, 1, 1, true},
                     {"conv4a", 256, 5, 512, 3, 1, 1, true},  {"conv4b", 512, 5, 512, 3, 1, 1, true}};
  const Def mini[] = {{"conv1", 1, 48, 8, 3, 1, 0, false},          {"conv2", 8, 46, 8, 3, 1, 0, false},
                      {"m1_res", 8, 44, 16, 1, 2, 0, false},        {"m1_dw1", 8, 44, 8, 3, 1, 1, false, 8},
                      {"m1_pw1", 8, 44, 16, 1, 1, 0, false},        {"m1_dw2", 16, 44, 16, 3, 1, 1, false, 16},
                      {"m1_pw2", 16, 44, 16, 1, 1, 0, false},       {"m2_res", 16, 22, 32, 1, 2, 0, false},
                      {"m2_dw1", 16, 22, 16, 3, 1, 1, false, 16},   {"m2_pw1", 16, 22, 32, 1, 1, 0, false},
                      {"m2_dw2", 32, 22, 32, 3, 1, 1, false, 32},   {"m2_pw2", 32, 22, 32, 1, 1, 0, false},
                      {"m3_res", 32, 11, 64, 1, 2, 0, false},       {"m3_dw1", 32, 11, 32, 3, 1, 1, false, 32},
                      {"m3_pw1", 32, 11, 64, 1, 1, 0, false},       {"m3_dw2", 64, 11, 64, 3, 1, 1, false, 64},
                      {"m3_pw2", 64, 11, 64, 1, 1, 0, false},       {"m4_res", 64, 6, 128, 1, 2, 0, false},
                      {"m4_dw1", 64, 6, 64, 3, 1, 1, false, 64},    {"m4_pw1", 64, 6, 128, 1, 1, 0, false},
                      {"m4_dw2", 128, 6, 128, 3, 1, 1, false, 128}, {"m4_pw2", 128, 6, 128, 1, 1, 0, false},
                      {"conv_out", 128, 3, 7, 3, 1, 1, true}};
  std::vector<Layer> out;
  auto add = [&](const char* model, const auto& defs, int batch) {
    for (const Def& d : defs)
      out.push_back({model, d.name, batch,
                     Conv2dShape::make(batch, d.C, d.H, d.H, d.K, d.R, d.R, d.stride, d.stride, d.pad, d.pad, 1, 1,
                                       d.groups, d.bias)});
  };
  // The issue's four targets first, then vgg_fer 256.
  add("vgg_fer", vgg, 64);
  add("mini_xception", mini, 32);
  add("mini_xception", mini, 256);
  add("vgg_fer", vgg, 640);
  add("vgg_fer", vgg, 256);
  return out;
}

// One of our implementations timed on one row: the cost model's plan, the fastest of the sweep,
// the relative error of the checked run.
struct Ours {
  double ms = NAN, best = NAN, err = NAN;
  std::string plan, best_plan, failed;  // failed: the plans of the sweep that failed their check
  bool ok = true;                       // also when not run
  std::vector<std::pair<std::string, std::array<double, 2>>> timed;  // every plan: ms, error
};

struct Row {
  const Layer* layer;
  ConvDir dir;
  double gflop, nchw = NAN, nhwc = NAN, fp32 = NAN, tf32 = NAN, limit = 0;
  Ours ours, ours_nhwc;
  int algo_nchw = -1, algo_nhwc = -1;
  double cudnn_bf16() const { return std::fmin(nchw, nhwc); }
  bool ok() const { return ours.ok && ours_nhwc.ok; }
};

double geomean(const std::vector<double>& v) {
  double s = 0;
  int n = 0;
  for (double x : v)
    if (std::isfinite(x) && x > 0) s += std::log(x), ++n;
  return n ? std::exp(s / n) : NAN;
}

struct Options {
  double seconds = 150, budget_ms = 20;
  int max_reps = 50, peak_n = 8192;
  bool sweep = true, nchw = true;
  std::string filter, csv, plans_csv;
};

std::vector<void*> ptrs(const std::vector<BufPtr>& v) {
  std::vector<void*> out;
  for (const BufPtr& b : v) out.push_back(b->p);
  return out;
}
std::vector<const void*> cptrs(const std::vector<BufPtr>& v) {
  std::vector<const void*> out;
  for (const BufPtr& b : v) out.push_back(b->p);
  return out;
}

// Every operand of one layer, `copies` rotated copies of each: BF16 NCHW and NHWC, the FP32 ones
// cuDNN FP32/TF32 reads (holding the bf16-rounded values), the FP32 references (NCHW and NHWC).
struct Operands {
  int copies;
  BufPtr yref, dxref, dwref, dbref, yref_h, dxref_h, b32, db32;
  std::vector<BufPtr> xb, wb, dyb, yb, dxb, dwb, dw32, x32c, w32c, dy32c, y32, dx32, dw32f;
  // NHWC; wk: krsc (rsk for the direct kernels), wt: crsk, wc: krsc (cuDNN's NHWC filter)
  std::vector<BufPtr> xh, dyh, wk, wt, wc, yh, dxh;
};

Operands make_operands(const Conv2dShape& s, const ExecContext& ctx, size_t l2, uint64_t seed) {
  const cudaStream_t st = static_cast<cudaStream_t>(ctx.cuda_stream);
  const int64_t nx = s.N * s.C * s.H * s.W, nw = s.weight_numel(), ny = s.N * s.K * s.P * s.Q;
  const size_t footprint = 2 * size_t(4 * nx + 4 * ny + 4 * nw) + 4 * size_t(nw);
  Operands o;
  o.copies = int(std::clamp<size_t>((3 * l2 + footprint - 1) / footprint, 1, 8));
  BufPtr x32 = buf(nx * 4), w32 = buf(nw * 4), dy32 = buf(ny * 4);
  o.b32 = buf(s.K * 4), o.db32 = buf(s.K * 4);
  o.yref = buf(ny * 4), o.dxref = buf(nx * 4), o.dwref = buf(nw * 4), o.dbref = buf(s.K * 4);
  o.yref_h = buf(ny * 4), o.dxref_h = buf(nx * 4);
  for (auto [p, n] : {std::pair{x32.get(), nx}, {w32.get(), nw}, {dy32.get(), ny}, {o.b32.get(), int64_t(s.K)}})
    fill_uniform_kernel<<<1024, 256, 0, st>>>(p->f(), n, seed += 7);
  const bool direct = conv2d_direct_nhwc_bf16_can_implement(s);
  for (int c = 0; c < o.copies; ++c) {
    o.xb.push_back(buf(nx * 2)), o.wb.push_back(buf(nw * 2)), o.dyb.push_back(buf(ny * 2));
    o.yb.push_back(buf(ny * 2)), o.dxb.push_back(buf(nx * 2)), o.dwb.push_back(buf(nw * 2));
    o.dw32.push_back(buf(nw * 4)), o.x32c.push_back(buf(nx * 4)), o.w32c.push_back(buf(nw * 4));
    o.dy32c.push_back(buf(ny * 4)), o.y32.push_back(buf(ny * 4)), o.dx32.push_back(buf(nx * 4));
    o.dw32f.push_back(buf(nw * 4));
    o.xh.push_back(buf(nx * 2)), o.dyh.push_back(buf(ny * 2)), o.wk.push_back(buf(nw * 2));
    o.wt.push_back(buf(nw * 2)), o.wc.push_back(buf(nw * 2)), o.yh.push_back(buf(ny * 2));
    o.dxh.push_back(buf(nx * 2));
    cast_float_to_bf16_cuda(ctx, nx, x32->f(), o.xb[c]->h());
    cast_float_to_bf16_cuda(ctx, nw, w32->f(), o.wb[c]->h());
    cast_float_to_bf16_cuda(ctx, ny, dy32->f(), o.dyb[c]->h());
    cast_bf16_to_float_cuda(ctx, nx, o.xb[c]->h(), o.x32c[c]->f());
    cast_bf16_to_float_cuda(ctx, nw, o.wb[c]->h(), o.w32c[c]->f());
    cast_bf16_to_float_cuda(ctx, ny, o.dyb[c]->h(), o.dy32c[c]->f());
    nchw_to_nhwc(st, o.xb[c]->h(), s.N, s.C, s.H * s.W, o.xh[c]->h());
    nchw_to_nhwc(st, o.dyb[c]->h(), s.N, s.K, s.P * s.Q, o.dyh[c]->h());
    // from the FP32 copy of the bf16 weights: the packing's rounding is exact
    conv2d_pack_weights_cuda(ctx, s, direct ? Bf16WeightLayout::rsk : Bf16WeightLayout::krsc, o.w32c[c]->f(),
                             o.wk[c]->h());
    if (!direct) conv2d_pack_weights_cuda(ctx, s, Bf16WeightLayout::crsk, o.w32c[c]->f(), o.wt[c]->h());
    conv2d_pack_weights_cuda(ctx, s, Bf16WeightLayout::krsc, o.w32c[c]->f(), o.wc[c]->h());
  }
  const float* bias = s.has_bias ? o.b32->f() : nullptr;
  conv2d_forward_cuda(ctx, s, o.x32c[0]->f(), o.w32c[0]->f(), bias, o.yref->f());
  conv2d_backward_cuda(ctx, s, o.x32c[0]->f(), o.w32c[0]->f(), o.dy32c[0]->f(), o.dxref->f(), o.dwref->f(),
                       o.dbref->f());
  nchw_to_nhwc(st, o.yref->f(), s.N, s.K, s.P * s.Q, o.yref_h->f());
  nchw_to_nhwc(st, o.dxref->f(), s.N, s.C, s.H * s.W, o.dxref_h->f());
  CUDA_CHECK(cudaStreamSynchronize(st));
  return o;
}

// Checks run(plan, copy 0) against the direction's reference (poisoned outputs), then times the
// cost model's plan and, with the sweep, every tile at its chosen split, at the fewest slices the
// filter gradient's accuracy allows (one elsewhere) and at twice the split (the checked output is copy 0's, NCHW or
// NHWC by `nhwc`).
template <class Plan, class Run, class ChoosePlan, class Name>
Ours time_ours(const Options& o, const ExecContext& ctx, const Operands& d, const Row& r, bool nhwc, int tiles,
               const Plan* chosen, Run run, ChoosePlan choose, Name name) {
  const cudaStream_t st = static_cast<cudaStream_t>(ctx.cuda_stream);
  const Conv2dShape& s = r.layer->sh;
  const int64_t nx = s.N * s.C * s.H * s.W, nw = s.weight_numel(), ny = s.N * s.K * s.P * s.Q;
  const Buf& out = r.dir == ConvDir::forward         ? *(nhwc ? d.yh : d.yb)[0]
                   : r.dir == ConvDir::backward_data ? *(nhwc ? d.dxh : d.dxb)[0]
                                                     : *d.dw32[0];
  // Poisoned outputs, one run of copy 0, the relative error against the reference.
  auto check = [&](const Plan* plan) {
    CUDA_CHECK(cudaMemsetAsync(out.p, 0xff, out.bytes, st));
    CUDA_CHECK(cudaMemsetAsync(d.db32->p, 0xff, d.db32->bytes, st));
    run(plan, 0);
    if (r.dir == ConvDir::forward) return rel_error(st, out.p, true, (nhwc ? d.yref_h : d.yref)->f(), ny);
    if (r.dir == ConvDir::backward_data) return rel_error(st, out.p, true, (nhwc ? d.dxref_h : d.dxref)->f(), nx);
    double err = rel_error(st, out.p, false, d.dwref->f(), nw);
    if (s.has_bias) err = std::fmax(err, rel_error(st, d.db32->p, false, d.dbref->f(), s.K));
    return err;
  };
  Ours u;
  u.err = check(chosen);
  u.ok = u.err <= r.limit;
  u.plan = name(chosen);
  u.ms = time_ms(st, d.copies, o.max_reps, o.budget_ms, [&](int i) { run(chosen, i); });
  u.best = u.ms, u.best_plan = u.plan;
  u.timed.push_back({u.plan, {u.ms, u.err}});
  std::set<std::pair<int, int>> seen;
  if (chosen) seen.insert({chosen->tile, chosen->splits});
  for (int t = 0; o.sweep && t < tiles; ++t)
    for (int variant = 0; variant < 3; ++variant) {  // the tile's chosen split, one slice, twice the split
      Plan p = choose(t);
      if (variant > 0) {  // "one slice": as few as the filter gradient's accuracy allows
        const int fewest = conv2d_igemm_nhwc_bf16_min_splits(s, r.dir);
        if (p.splits == fewest) continue;
        p.splits = variant == 1 ? fewest : 2 * p.splits;
      }
      if (!seen.insert({p.tile, p.splits}).second) continue;
      const double err = check(&p);  // every plan of the sweep is checked too
      if (!(err <= r.limit)) {
        u.ok = false;
        u.failed += name(&p) + fmt::format(" err {:.1e} ", err);
        u.timed.push_back({name(&p), {NAN, err}});
        continue;
      }
      const double ms = time_ms(st, d.copies, o.max_reps, o.budget_ms, [&](int i) { run(&p, i); });
      u.timed.push_back({name(&p), {ms, err}});
      if (ms < u.best) u.best = ms, u.best_plan = name(&p);
    }
  return u;
}

// Our NCHW kernels on one row (the direct ones where C / groups == 1; C == 1 layers also sweep
// the implicit GEMM's tiles, depthwise ones have no GEMM).
Ours run_ours_nchw(const Options& o, const ExecContext& ctx, const Operands& d, const Row& r, int sms) {
  const Conv2dShape& s = r.layer->sh;
  const ConvDir dir = r.dir;
  const float* bias = s.has_bias ? d.b32->f() : nullptr;
  auto run = [&](const IgemmBf16Plan* plan, int i) {
    float* db_out = s.has_bias ? d.db32->f() : nullptr;
    if (dir == ConvDir::forward)
      plan ? conv2d_forward_igemm_bf16_cuda(ctx, s, d.xb[i]->h(), d.wb[i]->h(), bias, d.yb[i]->h(), plan)
           : conv2d_forward_direct_bf16_cuda(ctx, s, d.xb[i]->h(), d.wb[i]->h(), bias, d.yb[i]->h());
    else if (dir == ConvDir::backward_data)
      plan ? conv2d_backward_data_igemm_bf16_cuda(ctx, s, d.wb[i]->h(), d.dyb[i]->h(), d.dxb[i]->h(), plan)
           : conv2d_backward_data_direct_bf16_cuda(ctx, s, d.wb[i]->h(), d.dyb[i]->h(), d.dxb[i]->h());
    else
      plan ? conv2d_backward_filter_igemm_bf16_cuda(ctx, s, d.xb[i]->h(), d.dyb[i]->h(), d.dw32[i]->f(), db_out, plan)
           : conv2d_backward_filter_direct_bf16_cuda(ctx, s, d.xb[i]->h(), d.dyb[i]->h(), d.dw32[i]->f(), db_out);
  };
  const bool direct = conv2d_direct_bf16_can_implement(s), gemm = conv2d_igemm_bf16_can_implement(s);
  const IgemmBf16Plan chosen = conv2d_igemm_bf16_choose_plan(s, dir, sms, ctx.workspace_limit_bytes);
  return time_ours(
      o, ctx, d, r, false, gemm ? kIgemmBf16Tiles : 0, direct ? nullptr : &chosen, run,
      [&](int t) { return conv2d_igemm_bf16_choose_plan(s, dir, sms, ctx.workspace_limit_bytes, t); },
      [&](const IgemmBf16Plan* p) {
        return p ? conv2d_igemm_bf16_tile_name(p->tile) + "/" +
                       std::to_string(conv2d_igemm_bf16_effective_splits(s, dir, *p))
                 : std::string("direct");
      });
}

// Our NHWC kernels on one row (direct where C / groups == 1; the GEMM's sweep skips tiles the
// direction's scalar kernel would not run). A direct direction the rows kernel takes sweeps both
// kernels by name (tile 0: pixels, 1: rows), beside the automatic choice ("direct").
Ours run_ours_nhwc(const Options& o, const ExecContext& ctx, const Operands& d, const Row& r, int sms) {
  const Conv2dShape& s = r.layer->sh;
  const ConvDir dir = r.dir;
  const float* bias = s.has_bias ? d.b32->f() : nullptr;
  const bool direct = conv2d_direct_nhwc_bf16_can_implement(s);
  const auto kernel = [](const IgemmNhwcBf16Plan* p) {
    return !p ? DirectNhwcKernel::automatic : p->tile == 0 ? DirectNhwcKernel::pixels : DirectNhwcKernel::rows;
  };
  auto run = [&](const IgemmNhwcBf16Plan* plan, int i) {
    float* db_out = s.has_bias ? d.db32->f() : nullptr;
    if (dir == ConvDir::forward)
      !direct ? conv2d_forward_igemm_nhwc_cuda(ctx, s, d.xh[i]->h(), d.wk[i]->h(), bias, d.yh[i]->h(), false, plan)
              : conv2d_forward_direct_nhwc_cuda(ctx, s, d.xh[i]->h(), d.wk[i]->h(), bias, d.yh[i]->h(), false,
                                                kernel(plan));
    else if (dir == ConvDir::backward_data)
      !direct ? conv2d_backward_data_igemm_nhwc_cuda(ctx, s, d.wt[i]->h(), d.dyh[i]->h(), d.dxh[i]->h(), plan)
              : conv2d_backward_data_direct_nhwc_cuda(ctx, s, d.wk[i]->h(), d.dyh[i]->h(), d.dxh[i]->h(), kernel(plan));
    else
      !direct
          ? conv2d_backward_filter_igemm_nhwc_cuda(ctx, s, d.xh[i]->h(), d.dyh[i]->h(), d.dw32[i]->f(), db_out, plan)
          : conv2d_backward_filter_direct_nhwc_cuda(ctx, s, d.xh[i]->h(), d.dyh[i]->h(), d.dw32[i]->f(), db_out,
                                                    kernel(plan));
  };
  const bool vec = conv2d_igemm_nhwc_bf16_vectorized(s, dir);
  const bool wgmma = conv2d_igemm_nhwc_bf16_wgmma_usable();
  const IgemmNhwcBf16Plan chosen = conv2d_igemm_nhwc_bf16_choose_plan(s, dir, sms, ctx.workspace_limit_bytes, wgmma);
  const bool direct_sweep = direct && conv2d_direct_nhwc_bf16_rows_can_implement(s, dir);
  // the direct kernels' "plans" keep the fewest splits, so the sweep's split variants skip them
  const int fewest = conv2d_igemm_nhwc_bf16_min_splits(s, dir);
  return time_ours(
      o, ctx, d, r, true, direct ? (direct_sweep ? 2 : 0) : kIgemmNhwcBf16Tiles, direct ? nullptr : &chosen, run,
      [&](int t) {
        if (direct) return IgemmNhwcBf16Plan{t, fewest};
        return conv2d_igemm_nhwc_bf16_choose_plan(s, dir, sms, ctx.workspace_limit_bytes, wgmma,
                                                  vec ? t : kIgemmNhwcBf16ScalarTile);  // duplicates skipped
      },
      [&](const IgemmNhwcBf16Plan* p) {
        if (direct) return std::string(!p ? "direct" : p->tile == 0 ? "direct-pixels" : "direct-rows");
        return conv2d_igemm_nhwc_bf16_tile_name(vec ? p->tile : kIgemmNhwcBf16ScalarTile) + "/" +
               std::to_string(conv2d_igemm_nhwc_bf16_effective_splits(s, dir, *p));
      });
}

// cuDNN BF16 NCHW and NHWC (and FP32, TF32 NCHW with o.nchw) on one row; a configuration cuDNN
// refuses (or fails in) is reported as nan and the run goes on.
void run_cudnn(const Options& o, cudnnHandle_t dnn, const Buf& ws, cudaStream_t st, const Operands& d, Row& r) {
  const Conv2dShape& s = r.layer->sh;
  const bool fwd = r.dir == ConvDir::forward, dgrad = r.dir == ConvDir::backward_data;
  auto go = [&](cudnnDataType_t t, cudnnTensorFormat_t f, cudnnMathType_t m, int* algo) {
    const bool b16 = t == CUDNN_DATA_BFLOAT16, h = f == CUDNN_TENSOR_NHWC;
    // operands in the order of the direction's API call; cuDNN's NHWC filter is (K, R, S, C)
    const auto in1 = b16 ? cptrs(fwd     ? (h ? d.xh : d.xb)
                                 : dgrad ? (h ? d.wc : d.wb)
                                         : (h ? d.xh : d.xb))
                         : cptrs(fwd     ? d.x32c
                                 : dgrad ? d.w32c
                                         : d.x32c);
    const auto in2 = b16 ? cptrs(fwd ? (h ? d.wc : d.wb) : (h ? d.dyh : d.dyb)) : cptrs(fwd ? d.w32c : d.dy32c);
    const auto out = b16 ? ptrs(fwd     ? (h ? d.yh : d.yb)
                                : dgrad ? (h ? d.dxh : d.dxb)
                                        : d.dwb)
                         : ptrs(fwd     ? d.y32
                                : dgrad ? d.dx32
                                        : d.dw32f);
    try {
      const CudnnConv desc(s, t, f, m);
      const CudnnResult res =
          cudnn_time(dnn, st, desc, r.dir, d.copies, in1, in2, out, ws.p, ws.bytes, o.max_reps, o.budget_ms);
      if (algo) *algo = res.algo;
      return res.ms;
    } catch (const Error& e) {
      std::fprintf(stderr, "cudnn %s %s: %s\n", r.layer->name.c_str(), short_name(r.dir), e.what());
      return double(NAN);
    }
  };
  r.nchw = go(CUDNN_DATA_BFLOAT16, CUDNN_TENSOR_NCHW, CUDNN_TENSOR_OP_MATH, &r.algo_nchw);
  r.nhwc = go(CUDNN_DATA_BFLOAT16, CUDNN_TENSOR_NHWC, CUDNN_TENSOR_OP_MATH, &r.algo_nhwc);
  if (o.nchw) {
    r.fp32 = go(CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, CUDNN_FMA_MATH, nullptr);
    r.tf32 = go(CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, CUDNN_DEFAULT_MATH, nullptr);
  }
  CUDA_CHECK(cudaStreamSynchronize(st));
}

// Every direction of one layer: appends 3 rows.
void run_layer(const Layer& L, const Options& o, const ExecContext& ctx, cudnnHandle_t dnn, const Buf& ws, int sms,
               size_t l2, double peak, std::vector<Row>& rows) {
  const cudaStream_t st = static_cast<cudaStream_t>(ctx.cuda_stream);
  const Operands d = make_operands(L.sh, ctx, l2, 1000 + rows.size());
  for (ConvDir dir : kDirs) {
    Row r;
    r.layer = &L;
    r.dir = dir;
    r.gflop = L.sh.flops_forward() / 1e9;
    r.limit = dir == ConvDir::backward_filter ? 1e-3 : 1e-2;
    try {
      if (o.nchw) r.ours = run_ours_nchw(o, ctx, d, r, sms);
      r.ours_nhwc = run_ours_nhwc(o, ctx, d, r, sms);
      run_cudnn(o, dnn, ws, st, d, r);
      const double tflops = r.gflop / r.ours_nhwc.ms;
      std::printf(
          "%-13s b%-3d %-8s %-5s %6.2f GF | nchw %7.4f | nhwc %7.4f %-9s best %7.4f %-9s | cudnn nchw %7.4f "
          "nhwc %7.4f | fp32 %7.4f tf32 %7.4f | %5.0f TF/s %3.0f%% | cudnn nhwc/ours %5.2f | err %.1e %.1e %s\n",
          L.model.c_str(), L.batch, L.name.c_str(), short_name(dir), r.gflop, r.ours.ms, r.ours_nhwc.ms,
          r.ours_nhwc.plan.c_str(), r.ours_nhwc.best, r.ours_nhwc.best_plan.c_str(), r.nchw, r.nhwc, r.fp32, r.tf32,
          tflops, 100 * tflops / peak, r.nhwc / r.ours_nhwc.ms, r.ours.err, r.ours_nhwc.err, r.ok() ? "ok" : "FAIL");
      std::fflush(stdout);
    } catch (const Error& e) {  // a refused or failed call fails its row; the run goes on
      std::printf("%-13s b%-3d %-8s %-5s FAIL: %s\n", L.model.c_str(), L.batch, L.name.c_str(), short_name(dir),
                  e.what());
      r.ours_nhwc.ok = false;
    }
    rows.push_back(r);
  }
}

void write_csv(const std::string& path, const std::vector<Row>& rows, double peak) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) CNN_THROW("cannot write {}", path);
  std::fprintf(f,
               "model,batch,layer,N,C,H,W,K,R,S,stride,pad,groups,dir,gflop,ours_ms,ours_plan,ours_best_ms,"
               "ours_best_plan,ours_err,nhwc_ms,nhwc_plan,nhwc_best_ms,nhwc_best_plan,nhwc_err,cudnn_bf16_nchw_ms,"
               "cudnn_nchw_algo,cudnn_bf16_nhwc_ms,cudnn_nhwc_algo,cudnn_fp32_ms,cudnn_tf32_ms,nhwc_tflops,"
               "bf16_peak_tflops,err_limit,ok\n");
  for (const Row& r : rows) {
    const Conv2dShape& s = r.layer->sh;
    std::fprintf(f,
                 "%s,%d,%s,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%d,%d,%d,%s,%.4f,%.5f,%s,%.5f,%s,%.3e,%.5f,%s,%.5f,%s,"
                 "%.3e,%.5f,%d,%.5f,%d,%.5f,%.5f,%.2f,%.1f,%.0e,%d\n",
                 r.layer->model.c_str(), r.layer->batch, r.layer->name.c_str(), (long long)s.N, (long long)s.C,
                 (long long)s.H, (long long)s.W, (long long)s.K, (long long)s.R, (long long)s.S, s.stride_h, s.pad_h,
                 s.groups, to_string(r.dir), r.gflop, r.ours.ms, r.ours.plan.c_str(), r.ours.best,
                 r.ours.best_plan.c_str(), r.ours.err, r.ours_nhwc.ms, r.ours_nhwc.plan.c_str(), r.ours_nhwc.best,
                 r.ours_nhwc.best_plan.c_str(), r.ours_nhwc.err, r.nchw, r.algo_nchw, r.nhwc, r.algo_nhwc, r.fp32,
                 r.tf32, r.gflop / r.ours_nhwc.ms, peak, r.limit, r.ok() ? 1 : 0);
  }
  std::fclose(f);
}

// Every timed plan of our kernels: model, batch, layer, dir, layout, plan, ms, error, chosen.
void write_plans_csv(const std::string& path, const std::vector<Row>& rows) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) CNN_THROW("cannot write {}", path);
  std::fprintf(f, "model,batch,layer,dir,layout,plan,ms,err,chosen\n");
  for (const Row& r : rows)
    for (const Ours* u : {&r.ours, &r.ours_nhwc})
      for (size_t i = 0; i < u->timed.size(); ++i)
        std::fprintf(f, "%s,%d,%s,%s,%s,%s,%.5f,%.3e,%d\n", r.layer->model.c_str(), r.layer->batch,
                     r.layer->name.c_str(), short_name(r.dir), u == &r.ours ? "nchw" : "nhwc",
                     u->timed[i].first.c_str(), u->timed[i].second[0], u->timed[i].second[1], i == 0 ? 1 : 0);
  std::fclose(f);
}

void print_model_totals(const std::vector<Row>& rows) {
  std::printf(
      "\n== summary (times in ms, summed over a model's conv layers and directions, the first layer's\n"
      "   dgrad left out; cudnn best = the faster of NCHW and NHWC per row; * = fastest plan of the sweep)\n");
  std::printf("%-14s %5s | %8s | %8s %8s | %9s %9s %9s | %8s %8s | %s\n", "model", "batch", "ours nchw", "nhwc",
              "nhwc*", "cudnn nchw", "nhwc", "best", "fp32", "tf32", "cudnn nhwc / ours nhwc, cudnn best / ours nhwc");
  std::map<std::pair<std::string, int>, std::array<double, 8>> sums;
  std::vector<std::pair<std::string, int>> order;
  for (const Row& r : rows) {
    if (r.dir == ConvDir::backward_data && r.layer->sh.C == 1) continue;
    const auto key = std::make_pair(r.layer->model, r.layer->batch);
    if (!sums.count(key)) order.push_back(key), sums[key] = {};
    auto& a = sums[key];
    const double v[8] = {r.ours.ms, r.ours_nhwc.ms, r.ours_nhwc.best, r.nchw, r.nhwc, r.cudnn_bf16(), r.fp32, r.tf32};
    for (int i = 0; i < 8; ++i) a[i] += v[i];
  }
  for (const auto& key : order) {
    const auto& a = sums[key];
    std::printf("%-14s %5d | %8.3f | %8.3f %8.3f | %9.3f %9.3f %9.3f | %8.3f %8.3f | %.2f, %.2f\n", key.first.c_str(),
                key.second, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[4] / a[1], a[5] / a[1]);
  }
}

void print_summary(const std::vector<Row>& rows, double peak, int skipped) {
  print_model_totals(rows);
  std::printf(
      "\n== layout: geometric mean of NCHW time / NHWC time (> 1: NHWC faster), all rows | rows over 10 GFLOP\n");
  for (ConvDir dir : kDirs) {
    std::vector<double> q, big, ours, ours_big;
    for (const Row& r : rows)
      if (r.dir == dir) {
        q.push_back(r.nchw / r.nhwc), ours.push_back(r.ours.ms / r.ours_nhwc.ms);
        if (r.gflop > 10) big.push_back(r.nchw / r.nhwc), ours_big.push_back(r.ours.ms / r.ours_nhwc.ms);
      }
    std::printf("%-6s cudnn %.2f | %.2f (%zu rows)   ours %.2f | %.2f\n", short_name(dir), geomean(q), geomean(big),
                big.size(), geomean(ours), geomean(ours_big));
  }
  std::printf(
      "\n== largest vgg_fer layers: ours NHWC TFLOP/s (%% of the %.0f peak), best plan | cuDNN BF16 NHWC, "
      "ours / cuDNN NHWC | ours NCHW\n",
      peak);
  for (const Row& r : rows)
    if (r.layer->model == "vgg_fer" && (r.layer->batch == 640 || r.layer->batch == 64) && r.layer->name.back() == 'b')
      std::printf("%-7s b%-3d %-5s nhwc %5.0f (%2.0f%%) best %5.0f %-9s | cudnn nhwc %5.0f  %3.0f%% | nchw %5.0f\n",
                  r.layer->name.c_str(), r.layer->batch, short_name(r.dir), r.gflop / r.ours_nhwc.ms,
                  100 * r.gflop / r.ours_nhwc.ms / peak, r.gflop / r.ours_nhwc.best, r.ours_nhwc.best_plan.c_str(),
                  r.gflop / r.nhwc, 100 * r.nhwc / r.ours_nhwc.ms, r.gflop / r.ours.ms);
  std::vector<double> heur;
  int far = 0, failed = 0, passed = 0;
  for (const Row& r : rows) {
    heur.push_back(r.ours_nhwc.ms / r.ours_nhwc.best);
    far += r.ours_nhwc.ms > 1.2 * r.ours_nhwc.best;
    (r.ok() ? passed : failed)++;
  }
  std::printf("\n== nhwc plan choice: geometric mean ours / ours* %.3f, %d rows more than 1.2x off\n", geomean(heur),
              far);
  for (const Row& r : rows)
    if (!r.ok())
      std::printf("FAIL %s b%d %s %s: err nchw %.3e nhwc %.3e > %.0e; sweep: %s%s\n", r.layer->model.c_str(),
                  r.layer->batch, r.layer->name.c_str(), short_name(r.dir), r.ours.err, r.ours_nhwc.err, r.limit,
                  r.ours.failed.c_str(), r.ours_nhwc.failed.c_str());
  if (skipped) std::printf("%d layers skipped: over the time box\n", skipped);
  std::printf("checks: %d passed, %d failed\n", passed, failed);
}

// Whether `id` contains one of the comma-separated parts of `filter` (every id when it is empty).
bool matches(const std::string& filter, const std::string& id) {
  if (filter.empty()) return true;
  size_t begin = 0;
  while (begin <= filter.size()) {
    const size_t end = std::min(filter.find(',', begin), filter.size());
    if (end > begin && id.find(filter.substr(begin, end - begin)) != std::string::npos) return true;
    begin = end + 1;
  }
  return false;
}

void list_layers() {
  for (const Layer& L : layers()) {
    std::printf("%s/%d/%s: %s | nhwc", L.model.c_str(), L.batch, L.name.c_str(), L.sh.to_string().c_str());
    const bool direct = conv2d_direct_nhwc_bf16_can_implement(L.sh);
    for (ConvDir d : kDirs) {
      const IgemmNhwcBf16Plan p = conv2d_igemm_nhwc_bf16_choose_plan(L.sh, d, 132, size_t(1) << 30, true);
      std::printf(" %s %s/%d", short_name(d), direct ? "direct" : conv2d_igemm_nhwc_bf16_tile_name(p.tile).c_str(),
                  direct ? 0 : p.splits);
    }
    std::printf("\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"BF16 tensor-core convolutions (NCHW, NHWC) against cuDNN on the FER models' conv layers"};
  Options o;
  app.add_option("--seconds", o.seconds, "start no layer after this many seconds")->check(CLI::PositiveNumber);
  app.add_option("--csv", o.csv, "write every row to this CSV file");
  app.add_option("--plans-csv", o.plans_csv, "write every timed plan of our kernels to this CSV file");
  app.add_option("--filter", o.filter,
                 "only layers whose 'model/batch/layer' contains one of these comma-separated texts");
  app.add_option("--max-repeats", o.max_reps, "timed runs per measurement at most")->check(CLI::PositiveNumber);
  app.add_option("--budget-ms", o.budget_ms, "timed work per measurement (sets the repeats)")
      ->check(CLI::PositiveNumber);
  app.add_option("--peak-n", o.peak_n, "size of the cuBLAS BF16 GEMM for the peak")->check(CLI::PositiveNumber);
  app.add_flag("!--no-sweep", o.sweep, "time only the cost model's plan, not every tile");
  app.add_flag("!--no-nchw", o.nchw, "skip our NCHW kernels and cuDNN FP32 / TF32 (NHWC against cuDNN BF16 only)");
  bool list = false;
  app.add_flag("--list", list, "print the layers (and the NHWC cost model's plans for 132 SMs) and exit");
  CLI11_PARSE(app, argc, argv);
  if (list) {
    list_layers();
    return 0;
  }
  try {
    const auto t0 = std::chrono::steady_clock::now();
    auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
    CudaContext cuda;
    const ExecContext& ctx = cuda.ctx();
    const auto st = static_cast<cudaStream_t>(ctx.cuda_stream);
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, cuda.device()));
    int runtime = 0;
    CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
    std::printf("device %s, %d SMs, L2 %d MB, CUDA runtime %d, cuDNN %zu\n", prop.name, prop.multiProcessorCount,
                prop.l2CacheSize >> 20, runtime, cudnnGetVersion());
    const double peak = bf16_peak_tflops(st, o.peak_n);
    std::printf("BF16 peak: cuBLAS GemmEx %d^3 (bf16 in/out, fp32 accumulate): %.1f TFLOP/s\n", o.peak_n, peak);
    cudnnHandle_t dnn = nullptr;
    CUDNN_OK(cudnnCreate(&dnn));
    CUDNN_OK(cudnnSetStream(dnn, st));
    const Buf ws(size_t(1) << 30);
    std::vector<Row> rows;
    const std::vector<Layer> all = layers();
    int skipped = 0, failed_layers = 0;
    for (const Layer& L : all) {
      const std::string id = fmt::format("{}/{}/{}", L.model, L.batch, L.name);
      if (!matches(o.filter, id)) continue;
      if (elapsed() > o.seconds) {
        ++skipped;
        continue;
      }
      try {
        run_layer(L, o, ctx, dnn, ws, prop.multiProcessorCount, size_t(prop.l2CacheSize), peak, rows);
      } catch (const Error& e) {  // its operands or reference failed: count it, go on
        std::printf("%s FAIL: %s\n", id.c_str(), e.what());
        ++failed_layers;
      }
      if (!o.csv.empty()) write_csv(o.csv, rows, peak);  // after every layer: a crash keeps what was measured
      if (!o.plans_csv.empty()) write_plans_csv(o.plans_csv, rows);
    }
    print_summary(rows, peak, skipped);
    std::printf("wall %.1f s\n", elapsed());
    cudnnDestroy(dnn);
    if (failed_layers) std::printf("%d layers failed before their rows\n", failed_layers);
    for (const Row& r : rows)
      if (!r.ok()) return 1;
    if (failed_layers) return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cnn-bf16-conv-bench: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
