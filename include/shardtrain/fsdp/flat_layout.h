// Shard arithmetic for one FSDP unit: its parameters laid end to end in one flat buffer,
// padded so the shard group divides it, and which pieces of which parameter each rank holds.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "shardtrain/model/params.h"

namespace shardtrain::fsdp {

struct FlatEntry {
  size_t spec;  // index into the model's ParamSpec list
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0, numel = 0;  // in the flat buffer
  bool decay = true;              // ParamSpec::decays()
};

struct FlatLayout {
  std::vector<FlatEntry> entries;
  int64_t numel = 0;        // sum of the entries
  int64_t padded = 0;       // numel rounded up to a multiple of shard_size
  int64_t shard_numel = 0;  // padded / shard_size
  int shard_size = 1;
  std::pair<int64_t, int64_t> shard_range(int shard_rank) const {
    return {shard_rank * shard_numel, (shard_rank + 1) * shard_numel};
  }
};

// Which of a unit's parameters a layout holds: all; or, under expert parallelism, all but the
// experts (kDense), or experts [first, first + count) alone (kExperts).
struct UnitPart {
  enum Kind { kAll, kDense, kExperts } kind = kAll;
  int64_t first = 0, count = 0;
  bool holds(const model::ParamSpec& s) const;
};

// The unit's parameters (those of `part`) in model order, its biases last.
FlatLayout flat_layout(const std::vector<model::ParamSpec>& specs, int64_t unit, int shard_size,
                       UnitPart part = {});

// A piece of one parameter inside one rank's shard: parameter elements
// [param_offset, param_offset + numel) sit at shard elements [shard_offset, ...).
struct Segment {
  size_t entry;
  int64_t param_offset = 0, shard_offset = 0, numel = 0;
};
std::vector<Segment> shard_segments(const FlatLayout& layout, int shard_rank);

}  // namespace shardtrain::fsdp
