// One dispatch path for every op. An op entry point is an argument struct (like Conv2dForward: the
// context, the shape, then the operands as typed views with their shapes commented) plus a table
// of implementations, each row {backend, dtype, name, supports, run}. run_op(backend, args) runs
// the row of that backend for the operands' dtype; op_supports(...) is the non-throwing question
// layers ask before they choose a backend. registry.cpp lists every table, so a build without
// CUDA simply has no cuda or cudnn rows (asking for one throws: never a silent fallback).
//
// Names: a backend's default row is named after the backend ("cuda"); a named strategy is
// "<backend>:<strategy>" ("cuda:direct") and is run only when asked for by name (conv2d's
// algorithms, conv2d_algo.h, are its rows of this kind).
//
// BF16 rows (train.precision bf16), the contract every op's bf16 row keeps:
//  - Activation operands (x, y, dy, dx of an op; whatever its comment shapes (N, C, H, W) or
//    (N, F) or (n)) are bf16, rank-4 ones stored channels-last, (N, H, W, C) (core/tensor.h); the
//    shape structs keep the logical NCHW sizes. Everything else stays f32 exactly as in the f32
//    rows: parameters (w, b, gamma, beta), their gradients (dw, db, dgamma, dbeta, written in
//    FP32, never rounded to bf16), running and saved statistics, loss values.
//  - Sums and arithmetic in FP32 (or double); each bf16 output is rounded once, to nearest even
//    (core/bf16.h: to_bf16 on the CPU, bf16_bits_from_float on the GPU: the same bits).
//  - Weights: a bf16 conv2d or dense row reads the FP32 master weights it is given and casts (and
//    packs) them into ctx.workspace itself; its workspace_bytes counts that. A call may instead give
//    a prepacked copy (the args' w16, ops/packed_weights.h: a training step packs every layer's
//    once, graph/weight_packs.h), which the row then reads: the same values, no per-call pack.
//  - The cpu bf16 row is the emulation the GPU rows are tested against: it widens its bf16 operands
//    into f32 NCHW (widen, ops/convert.h), runs the op's f32 arithmetic, and rounds each
//    activation output once back into bf16 channels-last (narrow): the same rounding points.
//  - Dropout's keep mask is indexed by the storage index (channels-last for bf16).
// F16 rows (a precision fp16 layer) keep the same contract with f16 in place of bf16 (core/fp16.h:
// to_f16, f16_bits_from_float; View::f16_data()). The cpu bf16 rows are the cpu f16 rows too
// (registered for both dtypes: widen and narrow read the views' dtype); conv2d's are
// conv2d_forward_emulated_cpu<T>. The cuda f16 rows are the cuda bf16 rows' kernels instantiated
// for f16 (templates on the element type over ops/half16.cuh's traits), each next to its bf16 row.
// F32CL rows (a tf32 layer whose activations are stored channels-last, train.tf32_layout): the
// activation operands are f32 values in the bf16 rows' layout, everything else as in the f32 rows,
// nothing rounded. A layout-free op (activation, add, dropout, dense) lists its f32 functions again
// as its f32cl rows (View::f32() reads both); a layout-bound one (conv2d, batchnorm, pooling,
// concat) lists the channels-last kernels instantiated for float (ops/half16.cuh's float section)
// on cuda, and the cpu bf16 rows (widen and narrow read f32cl too) or its own on the cpu.
// Adding one (no layer is touched): write the kernel, add its row next to the f32 sibling in
// registry.cpp, e.g.
//   {Backend::cuda, DType::bf16, "cuda", activation_cuda_bf16_supports, activation_forward_cuda_bf16},
// read operands with View::bf16_data(), and mark the activation operands of the op's cases in
// tests/ops/test_backend_ops*.cpp (Case::act, with bf16_exact inputs): the harness then binds the
// row in bf16 and compares it with the oracle at tests/support/tolerance.h's bf16 tolerance.
// Trap: the dispatcher keys on args.dtype(), the dtype of the op's activation operand (x or y
// forward, dy backward). supports() is a question about shapes (operands may be null); an operand whose
// dtype the row does not read makes its checked accessor throw when the row runs.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/view.h"
#include "ops/backend.h"

namespace cnn {

// One implementation of the entry point whose argument struct is Args.
template <typename Args>
struct OpImpl {
  Backend backend = Backend::cpu;
  DType dtype = DType::f32;
  const char* name = "";  // "cpu" | "cuda" | "cudnn" (the backend's default) or "<backend>:<strategy>"
  // Non-throwing: whether this row computes arguments of this shape; reads the shape and
  // parameters only (operands and the context may be null). Null: every shape.
  bool (*supports)(const Args&) = nullptr;
  void (*run)(const Args&) = nullptr;
};

// Every implementation of one entry point in this build, in a fixed order.
template <typename Row>
struct ImplTable {
  const char* op = "";  // "activation forward": names the entry point in errors
  std::vector<Row> rows;
};
template <typename Args>
using OpTable = ImplTable<OpImpl<Args>>;

namespace detail {
inline std::string_view row_name(const char* s) { return s; }
inline std::string_view row_name(const std::string& s) { return s; }
// Whether `name` asks for this row: empty asks for the backend's default (its own name).
inline bool row_matches(std::string_view row, Backend b, std::string_view name) {
  return name.empty() ? row == to_string(b) : row == name;
}
// "cpu f32, cuda f32, cuda:direct f32" for error messages.
std::string describe_rows(const std::vector<std::pair<std::string, DType>>& rows);
[[noreturn]] void throw_no_impl(const char* op, Backend b, DType t, std::string_view name,
                                const std::vector<std::pair<std::string, DType>>& rows);
}  // namespace detail

// The row of backend b and dtype t named `name` (empty: the backend's default), or null when this
// build has none. Never throws.
template <typename Row>
const Row* find_impl(const ImplTable<Row>& table, Backend b, DType t, std::string_view name = {}) noexcept {
  for (const Row& r : table.rows)
    if (r.backend == b && r.dtype == t && detail::row_matches(detail::row_name(r.name), b, name)) return &r;
  return nullptr;
}

// The same, throwing cnn::Error that names the entry point, backend, dtype and what the build has.
template <typename Row>
const Row& impl_for(const ImplTable<Row>& table, Backend b, DType t, std::string_view name = {}) {
  if (const Row* r = find_impl(table, b, t, name)) return *r;
  std::vector<std::pair<std::string, DType>> have;
  for (const Row& r : table.rows) have.emplace_back(std::string(detail::row_name(r.name)), r.dtype);
  detail::throw_no_impl(table.op, b, t, name, have);
}

// The checked f32 pointers of `count` views, for implementations that index an array of operands
// (add, concat).
inline std::vector<const float*> f32_pointers(const ConstView* views, size_t count) {
  std::vector<const float*> out(count);
  for (size_t i = 0; i < count; ++i) out[i] = views[i].f32();
  return out;
}
inline std::vector<float*> f32_pointers(const View* views, size_t count) {
  std::vector<float*> out(count);
  for (size_t i = 0; i < count; ++i) out[i] = views[i].f32();
  return out;
}
// The same for bf16 operands (their bf16 rows).
inline std::vector<const bf16*> bf16_pointers(const ConstView* views, size_t count) {
  std::vector<const bf16*> out(count);
  for (size_t i = 0; i < count; ++i) out[i] = views[i].bf16_data();
  return out;
}
inline std::vector<bf16*> bf16_pointers(const View* views, size_t count) {
  std::vector<bf16*> out(count);
  for (size_t i = 0; i < count; ++i) out[i] = views[i].bf16_data();
  return out;
}

// How the dispatcher calls a row and asks it about a shape; conv2d's rows (ConvAlgo) have their
// own overloads in conv2d_algo.h, found by argument-dependent lookup.
template <typename Args>
void invoke(const OpImpl<Args>& r, const Args& a) {
  r.run(a);
}
template <typename Args>
bool row_supports(const OpImpl<Args>& r, const Args& a) noexcept {
  return r.supports == nullptr || r.supports(a);
}

// Whether a row of backend b for dtype t (named `name`; empty: the backend's default) exists here
// and supports `a`'s shape (operands and the context may be null: the question layers ask before
// they have tensors). Never throws.
template <typename Args>
bool op_supports(Backend b, DType t, const Args& a, std::string_view name = {}) noexcept {
  const auto* r = find_impl(Args::table(), b, t, name);
  return r != nullptr && row_supports(*r, a);
}

// Runs the row of backend b for the operands' dtype: the backend's default, or the one named
// `name` (conv2d's algorithms). Throws when this build has none.
template <typename Args>
void run_op(Backend b, const Args& a, std::string_view name = {}) {
  const auto& table = Args::table();
  CNN_CHECK(a.ctx != nullptr, "{}: called without an execution context", table.op);
  invoke(impl_for(table, b, a.dtype(), name), a);
}

}  // namespace cnn
