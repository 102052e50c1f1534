// World-size arithmetic: the weight of a short batch's shares, and moving a checkpoint's data
// cursor to another number of ranks.
#include "dist/world_math.h"
#include "support/catch.h"

using namespace cnn;

TEST_CASE("a full global batch weighs every share 1, a short one by its share of the samples", "[cpu]") {
  CHECK(global_batch_samples(0, 32, 100) == 32);
  CHECK(global_batch_samples(3, 32, 100) == 4);
  CHECK(global_batch_samples(4, 32, 100) == 0);
  CHECK(share_weight(16, 32, 2) == 1.0);
  // 4 samples over 2 ranks: 2 + 2, each gradient is a mean over 2 of the 4.
  CHECK(share_weight(2, 4, 2) == 1.0);
  // 5 samples over 4 ranks: 2 + 1 + 1 + 1.
  CHECK(share_weight(2, 5, 4) == Approx(1.6));
  CHECK(share_weight(1, 5, 4) == Approx(0.8));
  CHECK(share_weight(0, 3, 4) == 0.0);
  // The weights average to 1, so (sum over ranks) / world is the mean over the batch.
  CHECK((1.6 + 0.8 * 3) / 4 == Approx(1.0));
}

TEST_CASE("a data cursor moves to another world size at the same sample", "[cpu]") {
  // 2 ranks x 16: batch 3 = sample 96; 1 rank x 16: batch 6.
  CursorMove m = convert_data_cursor(2, 3, 16, 2, 1, 10, 19);
  CHECK(m.exact);
  CHECK(m.epoch == 2);
  CHECK(m.next_batch == 6);
  CHECK(m.position == 96);
  // 1 -> 4 ranks: sample 128 = batch 2 of 64.
  m = convert_data_cursor(0, 8, 16, 1, 4, 19, 5);
  CHECK(m.exact);
  CHECK(m.next_batch == 2);
}

TEST_CASE("a cursor with no batch boundary in the new world skips to the end of its epoch", "[cpu]") {
  // 1 rank: batch 3 = sample 48; 2 ranks x 16 = 32 per batch: 48 is no multiple.
  CursorMove m = convert_data_cursor(1, 3, 16, 1, 2, 7, 4);
  CHECK_FALSE(m.exact);
  CHECK(m.epoch == 1);
  CHECK(m.next_batch == 4);  // the epoch's end: its end-of-epoch work still runs
  CHECK(m.position == 48);
}

TEST_CASE("a cursor at the end of an epoch stays at the end", "[cpu]") {
  // 100 samples: 1 rank x 16 has 7 batches (the last short), 2 ranks x 16 have 4.
  CursorMove m = convert_data_cursor(0, 7, 16, 1, 2, 7, 4);
  CHECK(m.exact);
  CHECK(m.next_batch == 4);
}
