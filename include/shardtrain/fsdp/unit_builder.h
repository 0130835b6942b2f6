// Building and loading the FSDP units: each rank allocates only its shard of every unit and
// fills it from the seeded init (identical at any world size) or from the safetensors files,
// reading only its own bytes. What trains is the TrainableLayout's: where the base is frozen it
// is kept in the compute dtype (with a CRC-32 of each piece, so a resumed run can check it has
// the same base) and each unit gets a second, small flat unit of what trains, sharded like the
// base.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <string>
#include <vector>

#include "shardtrain/fsdp/flat_unit.h"
#include "shardtrain/fsdp/sharding.h"
#include "shardtrain/fsdp/trainable_layout.h"
#include "shardtrain/io/safetensors.h"
#include "shardtrain/model/params.h"
#include "shardtrain/runtime/checksum.h"

namespace shardtrain::fsdp {

// Where expert parallelism puts a rank's experts: `size` ranks split each sparse layer's experts
// (this rank holds the rank-th share), and the ranks holding the same share shard them over
// shard_size (comm::GroupLayout's expert fields). size 1: no expert parallelism.
struct ExpertPlacement {
  int size = 1, rank = 0, shard_size = 1, shard_rank = 0;
  bool on() const { return size > 1; }
};

struct BuiltUnits {
  std::vector<FlatUnit> units;     // [num_layers + 2], model_units() order; the base
  std::vector<FlatUnit> adapters;  // [num_layers + 2] where the base is frozen; empty otherwise
  // [num_layers + 2] under expert parallelism: each unit's experts held here (empty units where
  // it has none), apart from `units`, which then hold the rest; frozen with the base. Their
  // pieces name unit units.size() + u.
  std::vector<FlatUnit> experts;
  std::vector<ShardPiece> pieces;  // this rank's pieces of every trainable unit's shard
  std::vector<runtime::CrcRow>
      base_crc_rows;  // frozen base: [specs] this rank's piece of each base parameter
};

// weights: the base's file (nullptr: seeded); trained: the file of what trains beside a frozen
// base, under trainable_key() names (nullptr: seeded). merged: the units bind q k v's and gate
// up's weights as one view each (model::RunPlan::merged_projections).
BuiltUnits build_units(const TrainableLayout& layout, const ShardingConfig& cfg, bool merged,
                       int shard_size, int shard_rank, uint64_t seed,
                       const io::SafetensorsModel* weights, const io::SafetensorsModel* trained,
                       at::Device device, const ExpertPlacement& experts = {});

}  // namespace shardtrain::fsdp
