#include <algorithm>
#include <chrono>
#include <cstring>
#include <iostream>
#include <set>
#include <vector>

#include "core/error.h"
#include "data/loader.h"
#include "data/synthetic_faces.h"
#include "data_test_util.h"
#include "support/catch.h"

using namespace cnn;

namespace {

Normalization unit(int64_t c) { return Normalization{std::vector<float>(c, 0.0f), std::vector<float>(c, 1.0f)}; }

AugmentSpec full_augment() {
  AugmentSpec a;
  a.crop_size = 6;
  a.crop_padding = 1;
  a.hflip = true;
  a.rotate = 15;
  a.brightness = 0.1;
  a.contrast = 0.2;
  return a;
}

std::vector<Batch> drain(Loader& l) {
  std::vector<Batch> out;
  Batch b;
  while (l.next(b)) out.push_back(b);
  return out;
}

bool same_batches(const std::vector<Batch>& a, const std::vector<Batch>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].labels != b[i].labels || a[i].indices != b[i].indices || a[i].index != b[i].index) return false;
    if (a[i].images.shape() != b[i].images.shape()) return false;
    if (std::memcmp(a[i].images.data(), b[i].images.data(), a[i].images.bytes()) != 0) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("loader serves every sample exactly once per epoch across ranks", "[cpu]") {
  Dataset d = cnn::test::patterned_dataset(23, 1, 8, 8, 5);
  for (int64_t world : {1, 2, 3}) {
    for (bool drop_last : {false, true}) {
      INFO("world " << world << " drop_last " << drop_last);
      std::vector<int64_t> seen;
      std::vector<int64_t> batches;
      std::vector<std::vector<int64_t>> per_batch_counts;
      for (int64_t rank = 0; rank < world; ++rank) {
        LoaderOptions o;
        o.batch_size = 3;
        o.seed = 11;
        o.rank = rank;
        o.world_size = world;
        o.drop_last = drop_last;
        Loader l(d, o, unit(1), full_augment());
        l.start_epoch(2);
        auto bs = drain(l);
        batches.push_back(static_cast<int64_t>(bs.size()));
        CHECK(static_cast<int64_t>(bs.size()) == l.batches_per_epoch());
        for (size_t i = 0; i < bs.size(); ++i) {
          CHECK(bs[i].index == static_cast<int64_t>(i));
          CHECK(bs[i].images.shape() == Shape({bs[i].size(), 1, 6, 6}));
          if (per_batch_counts.size() <= i) per_batch_counts.resize(i + 1);
          per_batch_counts[i].push_back(bs[i].size());
          for (size_t k = 0; k < bs[i].indices.size(); ++k) {
            seen.push_back(bs[i].indices[k]);
            REQUIRE(bs[i].labels[k] == d.labels[bs[i].indices[k]]);
          }
        }
      }
      // Same number of steps on every rank, shares differing by at most one.
      CHECK(std::all_of(batches.begin(), batches.end(), [&](int64_t n) { return n == batches[0]; }));
      for (auto& counts : per_batch_counts) {
        CHECK(*std::max_element(counts.begin(), counts.end()) - *std::min_element(counts.begin(), counts.end()) <= 1);
      }
      std::set<int64_t> unique(seen.begin(), seen.end());
      CHECK(unique.size() == seen.size());
      const int64_t global = 3 * world;
      CHECK(static_cast<int64_t>(seen.size()) == (drop_last ? 23 / global * global : 23));
    }
  }
}

TEST_CASE("ranks split each global batch into contiguous shares, including empty ones", "[cpu]") {
  Dataset d = cnn::test::patterned_dataset(13, 1, 4, 4, 3);
  LoaderOptions one;
  one.batch_size = 6;
  one.seed = 4;
  Loader single(d, one, unit(1), AugmentSpec{});
  std::vector<int64_t> order = single.epoch_order(0);
  // world 3, batch 2: global batches of 6, 6, 1; the last goes to rank 0 and ranks 1, 2 get empty batches.
  for (int64_t rank = 0; rank < 3; ++rank) {
    LoaderOptions o;
    o.batch_size = 2;
    o.seed = 4;
    o.rank = rank;
    o.world_size = 3;
    o.workers = 2;
    Loader l(d, o, unit(1), AugmentSpec{});
    l.start_epoch(0);
    auto bs = drain(l);
    REQUIRE(bs.size() == 3);
    CHECK(bs[0].indices == std::vector<int64_t>{order[2 * rank], order[2 * rank + 1]});
    CHECK(bs[1].indices == std::vector<int64_t>{order[6 + 2 * rank], order[7 + 2 * rank]});
    CHECK(bs[2].size() == (rank == 0 ? 1 : 0));
    CHECK(bs[2].images.shape() == Shape({rank == 0 ? 1 : 0, 1, 4, 4}));
  }
  // Augmentation follows the global position, so a 2-rank run sees exactly what 1 rank with twice the batch sees.
  std::vector<Batch> whole;
  {
    LoaderOptions o;
    o.batch_size = 4;
    o.seed = 9;
    Loader l(d, o, unit(1), full_augment());
    l.start_epoch(1);
    whole = drain(l);
  }
  LoaderOptions o;
  o.batch_size = 2;
  o.seed = 9;
  o.world_size = 2;
  o.rank = 1;
  Loader half(d, o, unit(1), full_augment());
  half.start_epoch(1);
  auto part = drain(half);
  REQUIRE(part.size() == whole.size());
  const int64_t per = 36;
  CHECK(std::memcmp(part[0].images.data(), whole[0].images.data() + 2 * per, 2 * per * sizeof(float)) == 0);
}

TEST_CASE("loader batches are bitwise identical for 0, 1 and 3 workers", "[cpu]") {
  Dataset d = cnn::test::patterned_dataset(50, 1, 8, 8, 4);
  std::vector<std::vector<Batch>> runs;
  for (int64_t workers : {0, 1, 3}) {
    LoaderOptions o;
    o.batch_size = 7;
    o.seed = 5;
    o.workers = workers;
    o.prefetch = 3;
    Loader l(d, o, unit(1), full_augment());
    std::vector<Batch> all;
    for (int64_t e = 0; e < 2; ++e) {
      l.start_epoch(e);
      auto bs = drain(l);
      all.insert(all.end(), bs.begin(), bs.end());
    }
    runs.push_back(all);
  }
  CHECK(runs[0].size() == 16);
  CHECK(same_batches(runs[0], runs[1]));
  CHECK(same_batches(runs[0], runs[2]));
  // Two epochs differ in order and augmentation.
  CHECK(runs[0][0].indices != runs[0][8].indices);
}

TEST_CASE("start_epoch with a first batch reproduces the tail of an uninterrupted epoch", "[cpu]") {
  Dataset d = cnn::test::patterned_dataset(40, 1, 8, 8, 4);
  LoaderOptions o;
  o.batch_size = 6;
  o.seed = 21;
  o.workers = 2;
  Loader straight(d, o, unit(1), full_augment());
  straight.start_epoch(3);
  auto full = drain(straight);
  Loader resumed(d, o, unit(1), full_augment());
  resumed.start_epoch(0);  // some other epoch in flight first
  Batch b;
  REQUIRE(resumed.next(b));
  resumed.start_epoch(3, 4);
  CHECK(resumed.next_batch_index() == 4);
  auto tail = drain(resumed);
  CHECK(same_batches(tail, std::vector<Batch>(full.begin() + 4, full.end())));
  CHECK(tail.front().epoch == 3);
  resumed.start_epoch(3, resumed.batches_per_epoch());
  CHECK(!resumed.next(b));
}

TEST_CASE("drop_last and the partial last batch", "[cpu]") {
  Dataset d = cnn::test::patterned_dataset(10, 1, 4, 4, 2);
  LoaderOptions o;
  o.batch_size = 4;
  Loader keep(d, o, unit(1), AugmentSpec{});
  keep.start_epoch(0);
  auto kb = drain(keep);
  REQUIRE(kb.size() == 3);
  CHECK(kb[2].size() == 2);
  CHECK(kb[2].images.shape() == Shape({2, 1, 4, 4}));
  o.drop_last = true;
  Loader drop(d, o, unit(1), AugmentSpec{});
  drop.start_epoch(0);
  auto db = drain(drop);
  REQUIRE(db.size() == 2);
  CHECK(db[1].size() == 4);
}

TEST_CASE("eval mode keeps dataset order and produces centre crops or ten crops", "[cpu]") {
  Dataset d = cnn::test::patterned_dataset(5, 1, 6, 6, 2);
  AugmentSpec a;
  a.crop_size = 4;
  Augmenter ref(a, unit(1), 1, 6, 6);
  LoaderOptions o;
  o.batch_size = 3;
  o.mode = LoaderMode::eval;
  o.workers = 1;
  Loader l(d, o, unit(1), a);
  l.start_epoch(7);
  auto bs = drain(l);
  REQUIRE(bs.size() == 2);
  CHECK(bs[0].indices == std::vector<int64_t>{0, 1, 2});
  std::vector<float> c(16);
  ref.center_crop(d.sample(4), c.data());
  CHECK(std::memcmp(bs[1].images.data() + 16, c.data(), 16 * sizeof(float)) == 0);
  o.ten_crop = true;
  Loader t(d, o, unit(1), a);
  t.start_epoch(0);
  auto tb = drain(t);
  CHECK(tb[0].crops == 10);
  CHECK(tb[0].images.shape() == Shape({30, 1, 4, 4}));
  std::vector<float> ten(160);
  ref.ten_crop(d.sample(1), ten.data());
  CHECK(std::memcmp(tb[0].images.data() + 160, ten.data(), 160 * sizeof(float)) == 0);
}

TEST_CASE("train batches equal the augmenter applied with the sample's global position", "[cpu]") {
  Dataset d = cnn::test::patterned_dataset(9, 1, 8, 8, 3);
  LoaderOptions o;
  o.batch_size = 4;
  o.seed = 3;
  Loader l(d, o, unit(1), full_augment());
  l.start_epoch(5);
  auto bs = drain(l);
  Augmenter ref(full_augment(), unit(1), 1, 8, 8);
  std::vector<float> x(36);
  ref.apply(d.sample(bs[1].indices[2]), ref.draw(3, 5, 6), x.data());
  CHECK(std::memcmp(bs[1].images.data() + 2 * 36, x.data(), 36 * sizeof(float)) == 0);
}

TEST_CASE("a worker's exception reaches next() for its batch and the loader still shuts down", "[cpu]") {
  Dataset d = cnn::test::patterned_dataset(20, 1, 4, 4, 2);
  for (int64_t workers : {0, 2}) {
    INFO("workers " << workers);
    LoaderOptions o;
    o.batch_size = 4;
    o.workers = workers;
    o.on_batch = [](Batch& b) {
      if (b.index == 2) throw Error("broken batch 2");
    };
    Loader l(d, o, unit(1), AugmentSpec{});
    l.start_epoch(0);
    Batch b;
    REQUIRE(l.next(b));
    REQUIRE(l.next(b));
    CHECK(b.index == 1);
    CHECK_THROWS_WITH(l.next(b), "broken batch 2");
    REQUIRE(l.next(b));
    CHECK(b.index == 3);
  }
  // Destroying a loader with work in flight joins its threads.
  LoaderOptions o;
  o.batch_size = 1;
  o.workers = 3;
  o.prefetch = 8;
  Loader busy(d, o, unit(1), full_augment());
  busy.start_epoch(0);
  LoaderOptions bad = o;
  bad.prefetch = 0;
  CHECK_THROWS_AS(Loader(d, bad, unit(1), AugmentSpec{}), ConfigError);
  Loader early(d, o, unit(1), AugmentSpec{});
  Batch b;
  CHECK_THROWS_AS(early.next(b), Error);
}

TEST_CASE("loader throughput for 48x48 gray with crop, flip and rotate", "[.][bench]") {
  Dataset d = make_synthetic_faces(4096, 7, 1, 48, 48, 1);
  AugmentSpec a;
  a.crop_size = 44;
  a.crop_padding = 2;
  a.hflip = true;
  a.rotate = 10;
  LoaderOptions o;
  o.batch_size = 64;
  o.workers = 2;
  o.prefetch = 4;
  Loader l(d, o, unit(1), a);
  int64_t images = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (int64_t e = 0; e < 3; ++e) {
    l.start_epoch(e);
    Batch b;
    while (l.next(b)) images += b.size();
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "loader: " << images << " images in " << s << " s = " << images / s
            << " images/s (48x48 gray, crop 44 pad 2, flip, rotate 10, batch 64, 2 workers)\n";
  CHECK(images == 3 * 4096);
}
