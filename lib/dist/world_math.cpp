// World-size arithmetic (see world_math.h).
#include "dist/world_math.h"

#include <algorithm>

#include "core/error.h"

namespace cnn {

int64_t global_batch_samples(int64_t b, int64_t global, int64_t dataset) {
  return std::max<int64_t>(0, std::min(global, dataset - b * global));
}

double share_weight(int64_t n_local, int64_t n_global, int64_t world) {
  if (n_global <= 0) return 0.0;
  return double(n_local) * double(world) / double(n_global);
}

CursorMove convert_data_cursor(int64_t epoch, int64_t next_batch, int64_t batch, int64_t old_world, int64_t new_world,
                               int64_t batches_old, int64_t batches_new) {
  CNN_CHECK(batch >= 1 && old_world >= 1 && new_world >= 1, "batch {}, worlds {} -> {}", batch, old_world, new_world);
  CursorMove m;
  m.epoch = epoch;
  m.position = next_batch * batch * old_world;
  if (next_batch >= batches_old) {  // the epoch was complete: only its end-of-epoch work is left
    m.next_batch = batches_new;
    return m;
  }
  const int64_t global = batch * new_world;
  if (m.position % global == 0 && m.position / global <= batches_new) {
    m.next_batch = m.position / global;
    return m;
  }
  m.exact = false;
  m.next_batch = batches_new;
  return m;
}

}  // namespace cnn
