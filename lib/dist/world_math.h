// The arithmetic of a data-parallel run that depends only on the world size: the global batch, the
// weight of a rank's share of a short last batch, and moving a checkpoint's data cursor to another
// world size. Pure functions (tests/dist checks them). The learning rate's scaling by the world
// size is the schedule's (optim/schedule.h).
// Trap: the cursor counts GLOBAL batches of the world that wrote it (batch_size * world samples
// each), so it must be converted before it is used with a different world size.
#pragma once

#include <cstdint>

namespace cnn {

// Samples of global batch b of an epoch of `dataset` samples, global batch `global`.
int64_t global_batch_samples(int64_t b, int64_t global, int64_t dataset);

// The factor a rank's mean-loss gradient is multiplied by so that the average over ranks equals
// the gradient of the mean loss over the whole global batch: n_local * world / n_global
// (exactly 1 for a full batch).
double share_weight(int64_t n_local, int64_t n_global, int64_t world);

struct CursorMove {
  int64_t epoch = 0, next_batch = 0;
  bool exact = true;     // false: the rest of the epoch is skipped (no batch boundary there)
  int64_t position = 0;  // samples of the epoch already trained
};
// From (epoch, next_batch) in global batches of old_world to new_world. batches_new: the new
// loader's batches per epoch. A cursor at the end of an epoch stays at its end.
CursorMove convert_data_cursor(int64_t epoch, int64_t next_batch, int64_t batch, int64_t old_world, int64_t new_world,
                               int64_t batches_old, int64_t batches_new);

}  // namespace cnn
