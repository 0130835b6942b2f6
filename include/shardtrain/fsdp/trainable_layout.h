// Which tensors of each unit train and which are a frozen base, their sizes and dtypes: the one
// answer the unit builder, the engine's memory and the planner share. What trains is the model
// side's (model::TrainedParams: the parameters, or adapters beside a frozen base); this adds
// the units' sizes at a shard group size.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shardtrain/fsdp/flat_layout.h"
#include "shardtrain/model/activation_memory.h"
#include "shardtrain/model/params.h"
#include "shardtrain/model/trained_params.h"
#include "shardtrain/runtime/checksum.h"

namespace shardtrain::fsdp {

struct UnitSize {
  model::UnitKind kind = model::UnitKind::kEmbedding;
  int64_t numel = 0, padded = 0, shard_numel = 0;  // elements: FlatLayout's
};
inline UnitSize unit_size(const FlatLayout& l, model::UnitKind kind) {
  return {kind, l.numel, l.padded, l.shard_numel};
}
// Every unit of `specs` (the model's or the adapters'), in model_units() order, sharded over
// shard_size.
// expert_parallel: as TrainableLayout::sizes.
std::vector<UnitSize> unit_sizes(const model::ModelConfig& model,
                                 const std::vector<model::ParamSpec>& specs, int shard_size,
                                 int expert_parallel = 1);

// Every unit's sizes at one shard group size: the base, and the adapters where the base is frozen.
struct TrainingSizes {
  std::vector<UnitSize> base;      // the model's parameters, [units]
  std::vector<UnitSize> adapters;  // [units] when the base is frozen (a unit may have none); empty
                                   // when the base trains
  bool base_frozen() const { return !adapters.empty(); }
  const UnitSize& trainable(size_t u) const { return base_frozen() ? adapters[u] : base[u]; }
  bool trains(size_t u) const { return trainable(u).numel > 0; }
  int64_t gathered_numel(size_t u) const {
    return base[u].padded + (base_frozen() ? adapters[u].padded : 0);
  }
  std::vector<UnitSize> trainable_units() const;
};

// Whether each unit's backward runs: it trains, or a unit before it does and needs its input's
// gradient (a frozen embedding beside adapters runs none).
std::vector<bool> runs_backward(const TrainingSizes& sizes);

// A piece of one parameter held by this rank: what the optimizer steps and checkpoints save.
struct ShardPiece {
  std::string name;
  std::vector<int64_t> shape;  // the parameter's logical shape
  int64_t param_offset = 0;    // flat range of the parameter: [param_offset, + numel)
  int64_t numel = 0;
  bool decay = true;         // false for norm weights
  at::Tensor master;         // [numel] fp32 view of the persistent master shard
  int64_t unit = 0;          // where its gradient sits: that unit's gradient shard,
  int64_t shard_offset = 0;  // at this offset
};

class TrainableLayout {
 public:
  TrainableLayout(const model::ModelConfig& model, std::unique_ptr<model::TrainedParams> trained);
  const model::ModelConfig& model() const { return model_; }
  const std::vector<model::ParamSpec>& base_specs() const { return base_specs_; }
  // What trains and what checkpoints hold: the model's parameters, or the adapters.
  const std::vector<model::ParamSpec>& trainable_specs() const {
    return trained_->trainable_specs();
  }
  bool base_frozen() const { return trained_->base_frozen(); }
  // The dtype of a base shard: the fp32 master where it trains, else the compute dtype.
  at::ScalarType base_dtype(at::ScalarType compute) const {
    return base_frozen() ? compute : at::kFloat;
  }
  const model::TrainedParams& trained() const { return *trained_; }
  // expert_parallel > 1: a sparse layer's unit gathers its dense part over shard_size and this
  // rank's share of the experts over shard_size / expert_parallel (the two parts counted as one).
  TrainingSizes sizes(int shard_size, int expert_parallel = 1) const;

  // This rank's trainable pieces, in model order (the engine's, once built).
  const std::vector<ShardPiece>& pieces() const { return pieces_; }
  // Frozen base: (param_offset, numel, CRC-32 of the fp32 values) of this rank's piece of each
  // base parameter as read at construction, one row per llama_param_specs entry (none held: -1);
  // combined over the shard group into one checksum of the base (ckpt::base_crc32).
  const std::vector<runtime::CrcRow>& base_crc_rows() const { return base_crc_rows_; }
  void hold(std::vector<ShardPiece> pieces, std::vector<runtime::CrcRow> base_crc_rows) {
    pieces_ = std::move(pieces);
    base_crc_rows_ = std::move(base_crc_rows);
  }

 private:
  std::vector<ShardPiece> pieces_;
  std::vector<runtime::CrcRow> base_crc_rows_;
  model::ModelConfig model_;
  std::vector<model::ParamSpec> base_specs_;
  std::unique_ptr<model::TrainedParams> trained_;
};

}  // namespace shardtrain::fsdp
