// Bucketed gradient averaging during backward. Parameters become final in reverse layout order,
// so consecutive ones (in that order) form a contiguous range of the flat gradient buffer: a
// bucket. A bucket's mean is started as soon as its last parameter is final (on_ready), so with
// NCCL the reduction of late layers overlaps the backward of early ones; finish() waits for all.
// Trap: every rank must start the buckets in the same order; a rank without samples calls
// reduce_all() (zeros, every bucket in plan order) instead of running backward.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dist/communicator.h"

namespace cnn {

// A trainable parameter's slice [offset, offset + count) of the flat gradient buffer.
struct GradSpan {
  int param = 0;  // index into Graph::params()
  int64_t offset = 0, count = 0;
};

struct GradBucket {
  int64_t begin = 0, end = 0;  // floats [begin, end): from the first to the last float of its params
  std::vector<int> params;     // in ready order
  int64_t numel() const { return end - begin; }
};

// Splits `ready_order` (spans in the order their gradients become final) into buckets of
// consecutive spans, closing a bucket once it holds at least `bucket_floats` floats (a bucket
// always holds at least one parameter; 0 puts every parameter in its own bucket). Throws when a
// bucket's range would overlap another bucket's (a layout that is not monotone in ready order).
std::vector<GradBucket> plan_buckets(const std::vector<GradSpan>& ready_order, int64_t bucket_floats);

class GradReducer {
 public:
  // grads: the flat gradient buffer on `where`. bucket_mb: MiB (2^20 bytes) of float gradients.
  GradReducer(Communicator& comm, std::vector<GradSpan> ready_order, double bucket_mb, Compression c, Device where,
              float* grads);
  const std::vector<GradBucket>& buckets() const { return m_buckets; }

  // Called before the reductions of each step.
  void begin_step();
  // A parameter's gradient is final: starts its bucket when that was the bucket's last one.
  void on_ready(int param);
  // For Executor::backward (a GradHook).
  std::function<void(int)> hook() {
    return [this](int p) { on_ready(p); };
  }
  // After backward: every bucket must have started (else the ranks would disagree); then waits.
  void finish();
  // The step of a rank with no samples: its gradients must already be zero. Starts every bucket
  // in plan order, then waits.
  void reduce_all();
  // Around blocking reductions (the watchdog's "all-reduce" phase): called with true before a
  // synchronous reduction and false after.
  void set_blocking_observer(std::function<void(bool)> f) { m_observer = std::move(f); }

 private:
  void start(size_t bucket);
  Communicator& m_comm;
  Compression m_compression;
  Device m_where;
  float* m_grads;
  std::vector<GradBucket> m_buckets;
  std::vector<int> m_bucket_of;    // param index -> bucket (-1: not trainable)
  std::vector<int> m_remaining;    // per bucket: params not yet final this step
  std::vector<char> m_param_done;  // per param: final this step
  size_t m_started = 0;
  std::function<void(bool)> m_observer;
};

}  // namespace cnn
