#include "shardtrain/data/sampler.h"

#include <algorithm>

namespace shardtrain::data {

std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> p(n);
  for (int64_t i = 0; i < n; ++i) p[i] = i;
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(epoch) + 1;
  auto next = [&state]() {  // splitmix64
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  for (int64_t i = n - 1; i > 0; --i) std::swap(p[i], p[next() % static_cast<uint64_t>(i + 1)]);
  return p;
}

int64_t steps_per_epoch(int64_t n, int64_t global_batch, bool drop_last) {
  return drop_last ? n / global_batch : (n + global_batch - 1) / global_batch;
}

std::pair<int64_t, int64_t> balanced_part(int64_t count, int64_t parts, int64_t index) {
  const int64_t base = count / parts, extra = count % parts;
  const int64_t begin = index * base + std::min(index, extra);
  return {begin, begin + base + (index < extra ? 1 : 0)};
}

std::vector<int64_t> global_batch(const std::vector<int64_t>& order, int64_t global_batch_size,
                                  int64_t row) {
  const int64_t n = static_cast<int64_t>(order.size());
  const int64_t b = std::min(n, row);
  const int64_t e = std::min(n, b + global_batch_size);
  return {order.begin() + b, order.begin() + e};
}

LoaderState next_position(LoaderState p, int64_t n, int64_t global_batch_size, bool drop_last) {
  const int64_t row = p.row + global_batch_size;
  const bool ends = row >= n || (drop_last && n - row < global_batch_size);
  return ends ? LoaderState{p.epoch + 1, 0} : LoaderState{p.epoch, row};
}

int64_t epoch_progress_rows(int64_t n, int64_t ref_batch, bool drop_last) {
  return std::max<int64_t>(1, steps_per_epoch(n, ref_batch, drop_last)) * ref_batch;
}

int64_t progress_rows(LoaderState p, int64_t n, int64_t ref_batch, bool drop_last) {
  const int64_t epoch_rows = epoch_progress_rows(n, ref_batch, drop_last);
  return p.epoch * epoch_rows +
         std::min(p.row,
                  epoch_rows);  // drop_last at a smaller batch reads past the reference's tail
}

int64_t steps_until(LoaderState from, int64_t total_rows, int64_t n, int64_t global_batch_size,
                    int64_t ref_batch, bool drop_last) {
  int64_t steps = 0;
  for (LoaderState p = from; progress_rows(p, n, ref_batch, drop_last) < total_rows; ++steps)
    p = next_position(p, n, global_batch_size, drop_last);
  return steps;
}

std::vector<std::vector<int64_t>> rank_micro_batches(const std::vector<int64_t>& batch, int rank,
                                                     int world, int64_t grad_accum) {
  const auto [rb, re] = balanced_part(static_cast<int64_t>(batch.size()), world, rank);
  std::vector<std::vector<int64_t>> micro(grad_accum);
  for (int64_t a = 0; a < grad_accum; ++a) {
    const auto [mb, me] = balanced_part(re - rb, grad_accum, a);
    micro[a].assign(batch.begin() + rb + mb, batch.begin() + rb + me);
  }
  return micro;
}

}  // namespace shardtrain::data
