// Loader (see loader.h). Workers claim batch numbers in order, build them without the lock and
// file them by number; next() waits for exactly the batch it needs, so order never depends on
// scheduling. Trap: each batch's content depends only on (seed, epoch, b, rank, world_size).
#include "data/loader.h"

#include <algorithm>

#include "core/error.h"
#include "core/rng.h"

namespace cnn {

Loader::Loader(const Dataset& data, LoaderOptions options, const Normalization& norm, const AugmentSpec& augment)
    : m_data(data),
      m_opt(std::move(options)),
      m_aug(augment, norm, data.channels, data.height, data.width) {
  CNN_CHECK(static_cast<int64_t>(data.pixels.size()) == data.size() * data.sample_bytes(),
            "dataset holds {} pixel bytes for {} samples of {}x{}x{}", data.pixels.size(), data.size(),
            data.channels, data.height, data.width);
  if (m_opt.batch_size < 1) {
    throw ConfigError({}, "train.batch_size", fmt::format("must be at least 1, got {}", m_opt.batch_size));
  }
  if (m_opt.workers < 0) throw ConfigError({}, "data.workers", fmt::format("must be >= 0, got {}", m_opt.workers));
  if (m_opt.prefetch < 1) {
    throw ConfigError({}, "data.prefetch", fmt::format("must be at least 1, got {}", m_opt.prefetch));
  }
  CNN_CHECK(m_opt.world_size >= 1 && m_opt.rank >= 0 && m_opt.rank < m_opt.world_size,
            "rank {} of world size {}", m_opt.rank, m_opt.world_size);
  CNN_CHECK(!m_opt.ten_crop || m_opt.mode == LoaderMode::eval, "ten-crop is for eval mode only");
  const int64_t global = m_opt.batch_size * m_opt.world_size;
  m_batches = m_opt.drop_last ? data.size() / global : (data.size() + global - 1) / global;
  for (int64_t i = 0; i < m_opt.workers; ++i) m_threads.emplace_back([this] { worker_loop(); });
}

Loader::~Loader() {
  {
    std::lock_guard<std::mutex> lk(m_mutex);
    m_stop = true;
  }
  m_work_cv.notify_all();
  for (auto& t : m_threads) t.join();
}

std::vector<int64_t> Loader::epoch_order(int64_t epoch) const {
  std::vector<int64_t> order(static_cast<size_t>(m_data.size()));
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  if (m_opt.mode == LoaderMode::train) {
    Rng rng(m_opt.seed, static_cast<uint64_t>(RngStream::shuffle), static_cast<uint64_t>(epoch) << 40);
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
  }
  return order;
}

std::pair<int64_t, int64_t> Loader::rank_range(int64_t b) const {
  const int64_t world = m_opt.world_size, r = m_opt.rank;
  const int64_t start = b * m_opt.batch_size * world;
  const int64_t m = std::min(m_opt.batch_size * world, m_data.size() - start);
  const int64_t base = m / world, extra = m % world;
  const int64_t begin = start + r * base + std::min(r, extra);
  return {begin, begin + base + (r < extra ? 1 : 0)};
}

void Loader::start_epoch(int64_t epoch, int64_t first_batch) {
  CNN_CHECK(epoch >= 0 && epoch < (int64_t{1} << 23), "epoch {} out of range", epoch);
  CNN_CHECK(first_batch >= 0 && first_batch <= m_batches, "first batch {} outside [0, {}]", first_batch, m_batches);
  auto order = std::make_shared<const std::vector<int64_t>>(epoch_order(epoch));
  {
    std::lock_guard<std::mutex> lk(m_mutex);
    ++m_generation;
    m_epoch = epoch;
    m_order = std::move(order);
    m_ready.clear();
    m_next_claim = m_next_deliver = first_batch;
    m_started = true;
  }
  m_work_cv.notify_all();
}

void Loader::build(int64_t epoch, int64_t b, const std::vector<int64_t>& order, Batch& out) const {
  const auto [begin, end] = rank_range(b);
  const int64_t n = end - begin;
  const int crops = m_opt.ten_crop ? 10 : 1;
  const int64_t per = m_aug.sample_numel();
  out.images = Tensor::empty(m_aug.sample_shape().with_batch(n * crops), Device::cpu, "loader batch");
  out.labels.resize(static_cast<size_t>(n));
  out.indices.resize(static_cast<size_t>(n));
  out.epoch = epoch;
  out.index = b;
  out.crops = crops;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t pos = begin + i, idx = order[static_cast<size_t>(pos)];
    float* dst = out.images.data() + i * crops * per;
    if (m_opt.mode == LoaderMode::train) {
      m_aug.apply(m_data.sample(idx), m_aug.draw(m_opt.seed, epoch, pos), dst);
    } else if (m_opt.ten_crop) {
      m_aug.ten_crop(m_data.sample(idx), dst);
    } else {
      m_aug.center_crop(m_data.sample(idx), dst);
    }
    out.labels[static_cast<size_t>(i)] = m_data.labels[static_cast<size_t>(idx)];
    out.indices[static_cast<size_t>(i)] = idx;
  }
  if (m_opt.on_batch) m_opt.on_batch(out);
}

void Loader::worker_loop() {
  std::unique_lock<std::mutex> lk(m_mutex);
  for (;;) {
    m_work_cv.wait(lk, [&] {
      return m_stop || (m_started && m_next_claim < m_batches && m_next_claim < m_next_deliver + m_opt.prefetch);
    });
    if (m_stop) return;
    const int64_t b = m_next_claim++, epoch = m_epoch;
    const uint64_t generation = m_generation;
    std::shared_ptr<const std::vector<int64_t>> order = m_order;
    lk.unlock();
    Slot slot;
    try {
      build(epoch, b, *order, slot.batch);
    } catch (...) {
      slot.error = std::current_exception();
    }
    lk.lock();
    if (generation == m_generation) {
      m_ready.emplace(b, std::move(slot));
      m_ready_cv.notify_all();
    }
  }
}

bool Loader::next(Batch& out) {
  CNN_CHECK(m_started, "Loader::next called before start_epoch");
  if (m_threads.empty()) {
    if (m_next_deliver >= m_batches) return false;
    build(m_epoch, m_next_deliver++, *m_order, out);
    return true;
  }
  Slot slot;
  {
    std::unique_lock<std::mutex> lk(m_mutex);
    if (m_next_deliver >= m_batches) return false;
    m_ready_cv.wait(lk, [&] { return m_ready.count(m_next_deliver) > 0; });
    auto it = m_ready.find(m_next_deliver);
    slot = std::move(it->second);
    m_ready.erase(it);
    ++m_next_deliver;
  }
  m_work_cv.notify_all();
  if (slot.error) std::rethrow_exception(slot.error);
  out = std::move(slot.batch);
  return true;
}

}  // namespace cnn
