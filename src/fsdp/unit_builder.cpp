#include "shardtrain/fsdp/unit_builder.h"

#include <ATen/ATen.h>

#include "shardtrain/model/lora.h"
#include "shardtrain/runtime/checksum.h"

namespace shardtrain::fsdp {

BuiltUnits build_units(const model::ModelConfig& model, const FsdpConfig& cfg, int shard_size, int shard_rank, uint64_t seed,
                       const io::SafetensorsModel* weights, const io::SafetensorsModel* adapters, at::Device device) {
  BuiltUnits b;
  const bool lora = cfg.lora.enabled();
  const auto fp32 = at::TensorOptions().dtype(at::kFloat).device(device);
  const auto specs = model::llama_param_specs(model);
  const auto unit_specs = model::model_units(model);
  // A LoRA run's base is frozen: no fp32 master, only the compute dtype.
  const auto base_options = lora ? fp32.dtype(cfg.param_dtype) : fp32;
  b.trainable_specs = lora ? model::lora_param_specs(model, cfg.lora) : specs;
  if (lora) b.base_crc_rows.assign(specs.size(), runtime::CrcRow{});
  for (int64_t u = 0; u < static_cast<int64_t>(unit_specs.size()); ++u) {
    FlatLayout layout = flat_layout(specs, u, shard_size);
    auto master = at::zeros({layout.shard_numel}, base_options);
    for (const Segment& s : shard_segments(layout, shard_rank)) {
      const auto& e = layout.entries[s.entry];
      // Only this rank's bytes are read from the file; the seeded init is per parameter.
      at::Tensor piece = weights ? weights->read_flat(e.name, s.param_offset, s.param_offset + s.numel).to(at::kFloat)
                                 : model::init_param(specs[e.spec], seed, model.initializer_range).flatten().narrow(0, s.param_offset, s.numel);
      master.narrow(0, s.shard_offset, s.numel).copy_(piece);  // host to device when on a GPU
      if (lora) {  // the frozen base's checksum is taken in fp32, before any conversion
        const auto c = piece.contiguous();
        b.base_crc_rows[e.spec] = {s.param_offset, s.numel, static_cast<int64_t>(runtime::crc32_bytes(c.data_ptr(), c.nbytes()))};
      }
    }
    b.units.emplace_back(unit_specs[u], std::move(layout), master, /*frozen=*/lora);
    b.units.back().set_merged(cfg.fused_layers);
    if (lora) {  // the unit's adapters: a second, small flat unit, sharded like the base
      FlatLayout al = flat_layout(b.trainable_specs, u, shard_size);
      auto am = at::zeros({al.shard_numel}, fp32);
      for (const Segment& s : shard_segments(al, shard_rank)) {
        const auto& e = al.entries[s.entry];
        at::Tensor piece = adapters ? adapters->read_flat(model::peft_key(e.name), s.param_offset, s.param_offset + s.numel).to(at::kFloat)
                                    : model::init_lora_param(b.trainable_specs[e.spec], seed).flatten().narrow(0, s.param_offset, s.numel);
        am.narrow(0, s.shard_offset, s.numel).copy_(piece);
      }
      b.adapters.emplace_back(unit_specs[u], std::move(al), am);
    }
    FlatUnit& unit = lora ? b.adapters.back() : b.units.back();
    for (const Segment& s : shard_segments(unit.layout(), shard_rank)) {
      const auto& e = unit.layout().entries[s.entry];
      ShardPiece p;
      p.name = e.name;
      p.shape = e.shape;
      p.param_offset = s.param_offset;
      p.numel = s.numel;
      p.decay = e.decay;
      p.master = unit.master().narrow(0, s.shard_offset, s.numel);
      p.unit = u;
      p.shard_offset = s.shard_offset;
      b.pieces.push_back(std::move(p));
    }
    if (cfg.no_sync_accumulation) b.no_sync.push_back(at::zeros({unit.layout().padded}, fp32));
  }
  return b;
}

}  // namespace shardtrain::fsdp
