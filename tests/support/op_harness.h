// The machinery of the cross-backend op harness (tests/ops/test_backend_ops.cpp): a Case is one
// call of one entry point (host inputs, the oracle's expected outputs, and how to build the
// argument struct from bound operands); check_rows runs every row of the entry point's table on one
// device class against every case and compares what it wrote.
// Each case also runs with every optional output left null (it must stay unwritten), with every
// declared alias (the output in the input's memory), and, on our CUDA rows, with every operand one
// float off 16-byte alignment (the scalar paths). Outputs are poisoned with NaN before each run.
// Rows of another dtype (bf16, f16, f32cl): the operands a case marks as activations (Case::act, with their
// logical NCHW dims) are bound in the row's dtype and layout (channels-last, core/tensor.h):
// uploaded rounded and permuted, read back widened and permuted back; every other operand stays
// f32 (parameters, their gradients, statistics). Such a case's float inputs must already be exact
// in the row's dtype (bf16_exact below makes them exact in both), so the oracle saw the same inputs
// as the row and only the row's own output rounding is tolerated (row_tolerance). A bf16, f16 or
// f32cl row meeting a case without marks fails. f32cl (FP32 channels-last) rounds nothing: its rows
// take the f32 rows' tolerances.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/bf16.h"
#include "core/cuda_context.h"
#include "core/device.h"
#include "core/tensor.h"
#include "ops/convert.h"
#include "ops/dispatch.h"
#include "support/catch.h"
#include "support/test_util.h"
#include "support/tolerance.h"

namespace cnn::test {

// One operand of a case, by name.
struct Operand {
  enum class Kind {
    in,            // read: values uploaded
    out,           // written: values are the expected ones
    optional_out,  // written unless null; a variant passes null and checks it stays unwritten
    inout,         // read and updated: `initial` uploaded, `values` expected
  };
  std::string name{};
  Kind kind = Kind::in;
  std::vector<float> values{};
  std::vector<float> initial{};          // inout only
  std::vector<double> doubles{};         // a double operand (batchnorm's stats and sums) instead of floats
  bool is_double = false;
  bool host_only = false;                // stays in host memory on every device (a host scalar result)
  std::vector<int64_t> act{};            // an activation's logical dims (N, C, H, W), (N, F) or (n); empty: always f32
  std::optional<Tolerance> tolerance{};  // this output's own tolerance
};

class Bound;

// One call of the entry point Args.
template <typename Args>
struct Case {
  std::string label{};
  std::vector<Operand> operands{};
  std::vector<int32_t> labels{};  // an int32 operand bound by Bound::labels(), if the op takes one
  std::vector<std::pair<std::string, std::string>> aliases{};  // (output, input): also run in place
  // Every output's tolerance in the f32 rows, when they must agree exactly; a row of another dtype
  // rounds its outputs and takes its precision's (row_tolerance).
  std::optional<Tolerance> tolerance{};
  std::function<Args(Bound&)> bind{};
  std::function<bool(std::string_view row)> rows{};  // null: every row; else which rows take this case

  Case& in(const std::string& name, std::vector<float> v) { return add({name, Operand::Kind::in, std::move(v)}); }
  Case& out(const std::string& name, std::vector<float> want) {
    return add({name, Operand::Kind::out, std::move(want)});
  }
  Case& optional_out(const std::string& name, std::vector<float> want) {
    return add({name, Operand::Kind::optional_out, std::move(want)});
  }
  Case& inout(const std::string& name, std::vector<float> initial, std::vector<float> want) {
    Operand o{name, Operand::Kind::inout, std::move(want)};
    o.initial = std::move(initial);
    return add(std::move(o));
  }
  Case& doubles(const std::string& name, Operand::Kind kind, std::vector<double> v) {
    Operand o{name, kind};
    o.doubles = std::move(v);
    o.is_double = true;
    return add(std::move(o));
  }
  Case& add(Operand o) {
    operands.push_back(std::move(o));
    return *this;
  }
  // Marks the operand added last as an activation of these logical dims (their product is its size):
  // bound in the row's dtype and layout.
  Case& act(std::vector<int64_t> dims) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    Operand& o = operands.back();
    if (o.is_double || n != int64_t(o.is_double ? o.doubles.size() : o.values.size()))
      FAIL("case " << label << ": act dims of " << o.name << " do not match its size");
    o.act = std::move(dims);
    return *this;
  }
  bool has_act() const {
    return std::any_of(operands.begin(), operands.end(), [](const Operand& o) { return !o.act.empty(); });
  }
  Operand& operand(const std::string& name) {
    for (Operand& o : operands)
      if (o.name == name) return o;
    FAIL("no operand " << name << " in case " << label);
    return operands.front();
  }
};

// The operands of one case on one device for one run: what bind() reads to build the arguments.
class Bound {
public:
  // `nulled`: an optional output passed as null; `alias`: (output, input) sharing the input's memory.
  Bound(const std::vector<Operand>& operands, const std::vector<int32_t>& labels, const ExecContext& ctx,
        DType dtype, int64_t offset, const std::string& nulled, const std::pair<std::string, std::string>* alias);
  Bound(const Bound&) = delete;
  Bound& operator=(const Bound&) = delete;

  const ExecContext* ctx() const { return &m_ctx; }
  // An operand as the row reads it: activations in the row's dtype, everything else f32.
  ConstView in(const std::string& name) { return ConstView(slot(name).data, slot(name).dtype); }
  View out(const std::string& name);  // null when this run leaves the output out
  // An operand the row takes as a plain float pointer (parameters, statistics): never an activation
  // bound in another dtype.
  const float* f32(const std::string& name) { return static_cast<const float*>(f32_slot(name).data); }
  float* f32_out(const std::string& name) {
    f32_slot(name);
    return static_cast<float*>(out(name).data());
  }
  double* f64(const std::string& name) { return static_cast<double*>(slot(name).data); }
  const int32_t* labels() const { return static_cast<const int32_t*>(m_labels.get()); }
  // Storage that lives as long as this run (the arrays of views add and concat take).
  template <typename T>
  const T* keep(std::vector<T> v) {
    auto p = std::make_shared<std::vector<T>>(std::move(v));
    m_kept.push_back(p);
    return p->data();
  }

  // After the run: an operand's values on the host.
  std::vector<float> floats(const std::string& name);
  std::vector<double> doubles(const std::string& name);

private:
  struct Slot {
    std::shared_ptr<void> storage;
    void* data = nullptr;
    Device device = Device::cpu;
    size_t count = 0;
    bool is_double = false;
    DType dtype = DType::f32;
    std::vector<int64_t> act;  // logical dims of an activation bound in another dtype
  };
  Slot& slot(const std::string& name);
  Slot& f32_slot(const std::string& name) {
    Slot& s = slot(name);
    if (s.dtype != DType::f32) FAIL("operand " << name << " is bound as " << to_string(s.dtype) << ", read as f32");
    return s;
  }

  const ExecContext& m_ctx;
  DType m_dtype;
  std::string m_nulled;
  std::map<std::string, Slot> m_slots;
  std::shared_ptr<void> m_labels;
  std::vector<std::shared_ptr<void>> m_kept;
};

// Where a row runs.
inline bool on_gpu(Backend b) { return b != Backend::cpu; }

// How closely a row must agree with the oracle (tolerance.h says why each size): the fast CPU
// path's (cpu:winograd's and the CPU rule row's, which may pick it, their own), any GPU kernel's,
// and the transforms' (FFT, Winograd; "cudnn", cuDNN's heuristic, may pick one of them). A row of
// another dtype gets its precision's tolerance here when its conversion is written
// (require_bindable).
inline Tolerance row_tolerance(Backend b, DType t, std::string_view name) {
  if (t == DType::bf16) return kBf16OutputVsCpu;
  if (t == DType::f16) return kF16OutputVsCpu;
  // "cpu", the CPU's rule row, takes cpu:winograd on eligible shapes.
  if (b == Backend::cpu) return name == "cpu" || name.find("winograd") != std::string_view::npos
                                    ? kCpuTransformVsReference
                                    : kFastCpuVsReference;
  if (name.find("fft") != std::string_view::npos || name.find("winograd") != std::string_view::npos ||
      name == "cudnn")
    return kGpuTransformVsCpu;
  return kGpuVsCpu;
}

// A row that may find no generated shape it accepts: cuDNN's named convolution algorithms (the
// library decides per shape and version which it takes), which are warned about instead.
inline bool may_idle(std::string_view name) { return name.rfind("cudnn:", 0) == 0; }

namespace detail {

// CNN_TEST_CASES_PER_ROW=K (unset or 0: all): each row runs at most its first K cases. For the
// compute-sanitizer job (tools/gpu_sanitize.sh sets it for racecheck, whose instrumentation makes
// the full case list outlast any time box): every row and code path still runs, on fewer shapes.
inline int cases_per_row() {
  static const int k = [] {
    const char* v = std::getenv("CNN_TEST_CASES_PER_ROW");
    return v ? std::max(0, std::atoi(v)) : 0;
  }();
  return k;
}

inline bool all_nan(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(), [](float f) { return std::isnan(f); });
}

// The harness binds f32, f32cl, bf16 and f16 rows; another dtype needs its conversion (Bound) and
// tolerance (row_tolerance) first.
inline void require_bindable(DType t, const std::string& row) {
  if (t != DType::f32 && t != DType::f32cl && t != DType::bf16 && t != DType::f16)
    FAIL(row << ": the harness has no " << to_string(t) << " conversion yet");
}

// NCHW index <-> channels-last storage index of an activation's logical dims (rank 4 permutes;
// other ranks are the same in both layouts).
inline size_t storage_index(const std::vector<int64_t>& d, size_t i) {
  if (d.size() != 4) return i;
  const size_t C = size_t(d[1]), HW = size_t(d[2] * d[3]);
  const size_t n = i / (C * HW), c = (i / HW) % C, hw = i % HW;
  return (n * HW + hw) * C + c;
}

}  // namespace detail

// Extra conditions a row puts on a call beyond supports (conv2d: its workspace fits the limit);
// overloaded for conv2d's rows in the harness file.
template <typename Row, typename Args>
bool row_fits(const Row&, const Args&) {
  return true;
}

// Runs every row of Args' table on the GPU (gpu) or the CPU (!gpu) over `cases`; returns, per row
// ("name dtype"), how many runs it made. `sync` waits for the device; `ctx` is the context rows run on.
template <typename Args>
std::map<std::string, int> check_rows(const std::vector<Case<Args>>& cases, bool gpu, const ExecContext& ctx,
                                      const std::function<void()>& sync) {
  std::map<std::string, int> ran;
  const auto& table = Args::table();
  for (const auto& row : table.rows) {
    const std::string row_name(cnn::detail::row_name(row.name));
    if (on_gpu(row.backend) != gpu) continue;
    const bool admitted = std::any_of(cases.begin(), cases.end(), [&](const Case<Args>& c) {
      return !c.rows || c.rows(row_name);
    });
    if (!admitted) continue;  // the cases are meant for other rows
    const std::string what = row_name + " " + to_string(row.dtype);
    ran.emplace(what, 0);
    detail::require_bindable(row.dtype, what);
    int cases_run = 0;  // distinct cases this row ran, for CNN_TEST_CASES_PER_ROW
    for (const Case<Args>& c : cases) {
      if (c.rows && !c.rows(row_name)) continue;
      if (detail::cases_per_row() > 0 && cases_run >= detail::cases_per_row()) break;
      const int runs_before = ran[what];
      if (row.dtype != DType::f32 && !c.has_act()) {
        INFO(table.op << " [" << what << "] " << c.label);
        FAIL("the case marks no activation operand (Case::act), so a " << to_string(row.dtype) << " row cannot bind it");
      }
      std::vector<std::string> nulled{""};
      for (const Operand& o : c.operands)
        if (o.kind == Operand::Kind::optional_out) nulled.push_back(o.name);
      std::vector<const std::pair<std::string, std::string>*> aliases{nullptr};
      for (const auto& a : c.aliases) aliases.push_back(&a);
      const std::vector<int64_t> offsets =
          row.backend == Backend::cuda ? std::vector<int64_t>{0, 1} : std::vector<int64_t>{0};
      for (int64_t offset : offsets)
        for (const std::string& null_name : nulled)
          for (const auto* alias : aliases) {
            if (alias && !null_name.empty()) continue;
            INFO(table.op << " [" << what << "] " << c.label << (offset ? ", misaligned" : "")
                          << (null_name.empty() ? "" : ", without " + null_name)
                          << (alias ? ", " + alias->first + " in " + alias->second : ""));
            Bound b(c.operands, c.labels, ctx, row.dtype, offset, null_name, alias);
            const Args args = c.bind(b);
            if (!row_supports(row, args) || !row_fits(row, args)) continue;
            invoke(row, args);
            sync();
            for (const Operand& o : c.operands) {
              if (o.kind == Operand::Kind::in) continue;
              INFO("output " << o.name);
              if (o.name == null_name) {
                CHECK(detail::all_nan(b.floats(o.name)));
                continue;
              }
              const Tolerance tol = o.tolerance  ? *o.tolerance
                                    : c.tolerance && row.dtype == DType::f32 ? *c.tolerance
                                                  : row_tolerance(row.backend, row.dtype, row_name);
              if (o.is_double)
                CHECK(compare(b.doubles(o.name), o.doubles, tol) == "");
              else
                CHECK(compare(b.floats(o.name), o.values, tol) == "");
            }
            ++ran[what];
          }
      cases_run += ran[what] > runs_before;
    }
  }
  for (const auto& [what, runs] : ran) {
    if (runs > 0) continue;
    if (may_idle(what.substr(0, what.find(' ')))) {
      WARN(table.op << ": " << what << " accepted none of the generated cases");
      continue;
    }
    INFO(table.op << ": " << what << " ran on no generated case");
    CHECK(runs > 0);
  }
  return ran;
}

// ---- what the case files share ----

inline std::vector<double> to_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }
inline std::vector<float> to_float(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }
inline std::vector<float> zeros(size_t n) { return std::vector<float>(n); }
// The values rounded to bf16 (and back), with magnitudes below f16's smallest normal (2^-14)
// flushed to zero: exact in bf16 and in f16 alike (8 significant bits fit f16's 11; the test
// values stay far below f16's 65504), so one case serves the rows of both dtypes.
inline std::vector<float> bf16_exact(std::vector<float> v) {
  for (float& f : v) f = std::fabs(f) < kF16MinNormal ? 0.0f : round_to_bf16(f);
  return v;
}

// The context the oracles run on.
inline const ExecContext& oracle_ctx() {
  static const ExecContext ctx = ExecContext::cpu(1);
  return ctx;
}

// Runs each case list's rows on one device class: the CPU (2 threads) or the GPU.
template <typename... Cases>
void check_family(bool gpu, const Cases&... cases) {
  if (!gpu) {
    const ExecContext cpu = ExecContext::cpu(2);
    (check_rows(cases, false, cpu, [] {}), ...);
    return;
  }
  CudaContext cuda;
  (check_rows(cases, true, cuda.ctx(), [&] { cuda.synchronize(); }), ...);
}

// The outputs of a case from the cpu row: the oracle of ops without a reference (phased batchnorm).
template <typename Args>
void expect_cpu_row(Case<Args>& c) {
  Bound b(c.operands, c.labels, oracle_ctx(), DType::f32, 0, "", nullptr);
  impl_for(Args::table(), Backend::cpu, DType::f32).run(c.bind(b));
  for (Operand& o : c.operands) {
    if (o.kind == Operand::Kind::in) continue;
    if (o.is_double)
      o.doubles = b.doubles(o.name);
    else
      o.values = b.floats(o.name);
  }
}

// ---- Bound ----

inline Bound::Bound(const std::vector<Operand>& operands, const std::vector<int32_t>& labels, const ExecContext& ctx,
                    DType dtype, int64_t offset, const std::string& nulled,
                    const std::pair<std::string, std::string>* alias)
    : m_ctx(ctx), m_dtype(dtype), m_nulled(nulled) {
  for (const Operand& o : operands) {
    Slot s;
    s.device = o.host_only ? Device::cpu : ctx.device;
    s.is_double = o.is_double;
    s.count = o.is_double ? o.doubles.size() : o.values.size();
    if (!o.act.empty() && dtype != DType::f32) {
      s.dtype = dtype;
      s.act = o.act;
    }
    const size_t elem = o.is_double ? sizeof(double) : dtype_size(s.dtype);
    const size_t skip = o.is_double ? 0 : size_t(offset);  // doubles stay 8-byte aligned
    const size_t bytes = (s.count + skip) * elem;
    const Device dev = s.device;
    s.storage = std::shared_ptr<void>(device_malloc(dev, std::max<size_t>(bytes, elem), "op harness operand"),
                                      [dev](void* p) { device_free(dev, p); });
    s.data = static_cast<char*>(s.storage.get()) + skip * elem;
    // Inputs hold their values, inout operands their initial ones, outputs NaN.
    std::vector<double> nan_d(s.count, std::nan(""));
    std::vector<float> nan_f(s.count, std::nanf(""));
    const void* src = nullptr;
    if (o.kind == Operand::Kind::in) src = o.is_double ? static_cast<const void*>(o.doubles.data()) : o.values.data();
    else if (o.kind == Operand::Kind::inout) src = o.initial.data();
    else src = o.is_double ? static_cast<const void*>(nan_d.data()) : nan_f.data();
    if (s.count && s.dtype != DType::f32) {  // bf16, f16 or f32cl: channels-last
      const float* f = static_cast<const float*>(src);
      std::vector<char> h(s.count * elem);
      for (size_t i = 0; i < s.count; ++i) {
        if (o.kind != Operand::Kind::out && o.kind != Operand::Kind::optional_out && !std::isnan(f[i]) &&
            round_to(s.dtype, f[i]) != f[i])
          FAIL("operand " << o.name << " holds " << f[i] << " at " << i << ", not exact in " << to_string(s.dtype)
                          << " (use bf16_exact)");
        store_from_float(h.data(), s.dtype, int64_t(detail::storage_index(s.act, i)), f[i]);
      }
      device_memcpy(s.data, dev, h.data(), Device::cpu, s.count * elem);
    } else if (s.count) {
      device_memcpy(s.data, dev, src, Device::cpu, s.count * elem);
    }
    m_slots[o.name] = s;
  }
  if (alias) m_slots[alias->first] = slot(alias->second);
  if (!labels.empty()) {
    const size_t bytes = labels.size() * sizeof(int32_t);
    const Device dev = ctx.device;
    m_labels = std::shared_ptr<void>(device_malloc(dev, bytes, "op harness labels"), [dev](void* p) { device_free(dev, p); });
    device_memcpy(m_labels.get(), dev, labels.data(), Device::cpu, bytes);
  }
}

inline View Bound::out(const std::string& name) {
  Slot& s = slot(name);
  if (name == m_nulled) return View(nullptr, s.dtype);
  return View(s.data, s.dtype);
}

inline Bound::Slot& Bound::slot(const std::string& name) {
  auto it = m_slots.find(name);
  if (it == m_slots.end()) FAIL("the case binds no operand " << name);
  return it->second;
}

inline std::vector<float> Bound::floats(const std::string& name) {
  Slot& s = slot(name);
  std::vector<float> v(s.count);
  if (s.count && s.dtype != DType::f32) {  // bf16, f16 or f32cl
    std::vector<char> h(s.count * dtype_size(s.dtype));
    device_memcpy(h.data(), Device::cpu, s.data, s.device, h.size());
    for (size_t i = 0; i < s.count; ++i) v[i] = load_as_float(h.data(), s.dtype, int64_t(detail::storage_index(s.act, i)));
  } else if (s.count) {
    device_memcpy(v.data(), Device::cpu, s.data, s.device, s.count * sizeof(float));
  }
  return v;
}

inline std::vector<double> Bound::doubles(const std::string& name) {
  Slot& s = slot(name);
  std::vector<double> v(s.count);
  if (s.count) device_memcpy(v.data(), Device::cpu, s.data, s.device, s.count * sizeof(double));
  return v;
}

}  // namespace cnn::test
