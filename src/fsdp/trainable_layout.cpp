#include "shardtrain/fsdp/trainable_layout.h"

#include "shardtrain/runtime/error.h"

namespace shardtrain::fsdp {
std::vector<UnitSize> unit_sizes(const model::ModelConfig& model,
                                 const std::vector<model::ParamSpec>& specs, int shard_size,
                                 int expert_parallel) {
  std::vector<UnitSize> out;
  const auto units = model::model_units(model);
  const int n = expert_parallel;
  for (int64_t u = 0; u < static_cast<int64_t>(units.size()); ++u) {
    if (n <= 1) {
      out.push_back(unit_size(flat_layout(specs, u, shard_size), units[u].kind));
      continue;
    }
    // Rank 0's share of the experts: every rank's is the same size.
    const FlatLayout dense = flat_layout(specs, u, shard_size, {UnitPart::kDense});
    const FlatLayout mine =
        flat_layout(specs, u, shard_size / n, {UnitPart::kExperts, 0, model.num_experts / n});
    out.push_back({units[u].kind, dense.numel + mine.numel, dense.padded + mine.padded,
                   dense.shard_numel + mine.shard_numel});
  }
  return out;
}

std::vector<UnitSize> TrainingSizes::trainable_units() const {
  return base_frozen() ? adapters : base;
}

std::vector<bool> runs_backward(const TrainingSizes& sizes) {
  std::vector<bool> runs(sizes.base.size());
  bool trains_before = false;  // some unit before this one trains
  for (size_t u = 0; u < runs.size(); ++u) {
    runs[u] = trains_before || sizes.trains(u);
    trains_before = runs[u];
  }
  return runs;
}

TrainableLayout::TrainableLayout(const model::ModelConfig& model,
                                 std::unique_ptr<model::TrainedParams> trained)
    : model_(model), base_specs_(model::llama_param_specs(model)), trained_(std::move(trained)) {}

TrainingSizes TrainableLayout::sizes(int shard_size, int expert_parallel) const {
  TrainingSizes s;
  s.base = unit_sizes(model_, base_specs_, shard_size, expert_parallel);
  if (base_frozen()) s.adapters = unit_sizes(model_, trainable_specs(), shard_size);
  return s;
}

}  // namespace shardtrain::fsdp
