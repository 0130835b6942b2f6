#include "shardtrain/fsdp/flat_layout.h"

#include <algorithm>

namespace shardtrain::fsdp {

bool UnitPart::holds(const model::ParamSpec& s) const {
  switch (kind) {
    case kAll:
      return true;
    case kDense:
      return s.expert < 0;
    case kExperts:
      return s.expert >= first && s.expert < first + count;
  }
  return false;
}

FlatLayout flat_layout(const std::vector<model::ParamSpec>& specs, int64_t unit, int shard_size,
                       UnitPart part) {
  FlatLayout l;
  l.shard_size = shard_size;
  // Biases after the unit's other parameters: q k v's (and gate up's) weights lie side by side,
  // and so do their biases, for the fused path's merged matmuls (FlatUnit::view).
  for (const bool biases : {false, true}) {
    for (size_t i = 0; i < specs.size(); ++i) {
      if (specs[i].unit != unit || specs[i].is_bias != biases || !part.holds(specs[i])) continue;
      l.entries.push_back(
          {i, specs[i].name, specs[i].shape, l.numel, specs[i].numel(), specs[i].decays()});
      l.numel += specs[i].numel();
    }
  }
  l.padded = (l.numel + shard_size - 1) / shard_size * shard_size;
  l.shard_numel = l.padded / shard_size;
  return l;
}

std::vector<Segment> shard_segments(const FlatLayout& l, int shard_rank) {
  const auto [begin, end] = l.shard_range(shard_rank);
  std::vector<Segment> out;
  for (size_t e = 0; e < l.entries.size(); ++e) {
    const auto& en = l.entries[e];
    const int64_t b = std::max(begin, en.offset), x = std::min(end, en.offset + en.numel);
    if (b < x) out.push_back({e, b - en.offset, b - begin, x - b});
  }
  return out;
}

}  // namespace shardtrain::fsdp
