// Bucket planning and the per-step bookkeeping of the gradient reducer (see grad_reducer.h).
#include "dist/grad_reducer.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace cnn {

std::vector<GradBucket> plan_buckets(const std::vector<GradSpan>& ready_order, int64_t bucket_floats) {
  std::vector<GradBucket> out;
  GradBucket cur;
  int64_t held = 0;
  for (const GradSpan& s : ready_order) {
    CNN_CHECK(s.count > 0 && s.offset >= 0, "parameter {}: span [{}, +{})", s.param, s.offset, s.count);
    if (cur.params.empty()) {
      cur.begin = s.offset;
      cur.end = s.offset + s.count;
    } else {
      cur.begin = std::min(cur.begin, s.offset);
      cur.end = std::max(cur.end, s.offset + s.count);
    }
    cur.params.push_back(s.param);
    held += s.count;
    if (held >= bucket_floats) {
      out.push_back(std::move(cur));
      cur = GradBucket{};
      held = 0;
    }
  }
  if (!cur.params.empty()) out.push_back(std::move(cur));
  // Each span must lie in exactly one bucket's range: no bucket range may reach into another's.
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (const GradBucket& b : out) ranges.emplace_back(b.begin, b.end);
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    CNN_CHECK(ranges[i].first >= ranges[i - 1].second,
              "gradient buckets overlap ([{}, {}) and [{}, {})): the parameters' layout is not monotone in the "
              "order their gradients become final",
              ranges[i - 1].first, ranges[i - 1].second, ranges[i].first, ranges[i].second);
  return out;
}

GradReducer::GradReducer(Communicator& comm, std::vector<GradSpan> ready_order, double bucket_mb, Compression c,
                         Device where, float* grads)
    : m_comm(comm), m_compression(c), m_where(where), m_grads(grads) {
  CNN_CHECK(bucket_mb > 0 && std::isfinite(bucket_mb), "dist.bucket_mb must be > 0, got {}", bucket_mb);
  const int64_t floats = std::max<int64_t>(1, std::llround(bucket_mb * 1048576.0 / sizeof(float)));
  m_buckets = plan_buckets(ready_order, floats);
  int max_param = -1;
  for (const GradSpan& s : ready_order) max_param = std::max(max_param, s.param);
  m_bucket_of.assign(size_t(max_param + 1), -1);
  for (size_t b = 0; b < m_buckets.size(); ++b)
    for (int p : m_buckets[b].params) {
      CNN_CHECK(m_bucket_of[size_t(p)] < 0, "parameter {} listed twice", p);
      m_bucket_of[size_t(p)] = int(b);
    }
  begin_step();
}

void GradReducer::begin_step() {
  m_remaining.resize(m_buckets.size());
  for (size_t b = 0; b < m_buckets.size(); ++b) m_remaining[b] = int(m_buckets[b].params.size());
  m_param_done.assign(m_bucket_of.size(), 0);
  m_started = 0;
}

void GradReducer::start(size_t bucket) {
  CNN_CHECK(bucket == m_started, "bucket {} is ready before bucket {}: buckets must start in plan order", bucket,
            m_started);
  const GradBucket& b = m_buckets[bucket];
  const bool blocking = m_observer && m_comm.kind() != "nccl";
  if (blocking) m_observer(true);
  m_comm.mean_async(m_grads + b.begin, b.numel(), m_where, m_compression);
  if (blocking) m_observer(false);
  ++m_started;
}

void GradReducer::on_ready(int param) {
  CNN_CHECK(param >= 0 && size_t(param) < m_bucket_of.size() && m_bucket_of[size_t(param)] >= 0,
            "gradient hook for parameter {}, which is in no bucket", param);
  CNN_CHECK(!m_param_done[size_t(param)], "gradient of parameter {} reported final twice in one step", param);
  m_param_done[size_t(param)] = 1;
  const int b = m_bucket_of[size_t(param)];
  if (--m_remaining[size_t(b)] == 0) start(size_t(b));
}

void GradReducer::finish() {
  CNN_CHECK(m_started == m_buckets.size(), "backward ended with {} of {} gradient buckets reduced", m_started,
            m_buckets.size());
  if (m_observer) m_observer(true);
  m_comm.wait_means();
  if (m_observer) m_observer(false);
  begin_step();
}

void GradReducer::reduce_all() {
  CNN_CHECK(m_started == 0, "reduce_all after {} buckets of this step were started", m_started);
  for (size_t b = 0; b < m_buckets.size(); ++b) start(b);
  finish();
}

}  // namespace cnn
