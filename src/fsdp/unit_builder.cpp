#include "shardtrain/fsdp/unit_builder.h"

#include <ATen/ATen.h>

#include <functional>

#include "shardtrain/runtime/checksum.h"

namespace shardtrain::fsdp {
namespace {

// This rank's shard of one unit: each segment's values from read(entry, from, to) put in place.
using ReadPiece = std::function<at::Tensor(const FlatEntry& e, int64_t from, int64_t to)>;
using SeePiece = std::function<void(const FlatEntry& e, const Segment& s, const at::Tensor& piece)>;
at::Tensor fill_shard(const FlatLayout& layout, int shard_rank, const at::TensorOptions& options,
                      const ReadPiece& read, const SeePiece& seen = {}) {
  auto shard = at::zeros({layout.shard_numel}, options);
  for (const Segment& s : shard_segments(layout, shard_rank)) {
    const FlatEntry& e = layout.entries[s.entry];
    const at::Tensor piece = read(e, s.param_offset, s.param_offset + s.numel);
    if (seen) seen(e, s, piece);
    shard.narrow(0, s.shard_offset, s.numel).copy_(piece);  // host to device when on a GPU
  }
  return shard;
}

}  // namespace

BuiltUnits build_units(const TrainableLayout& layout, const ShardingConfig& cfg, bool merged,
                       int shard_size, int shard_rank, uint64_t seed,
                       const io::SafetensorsModel* weights, const io::SafetensorsModel* trained,
                       at::Device device, const ExpertPlacement& experts) {
  BuiltUnits b;
  const bool frozen = layout.base_frozen();
  const auto fp32 = at::TensorOptions().dtype(at::kFloat).device(device);
  // What trains is built in host memory when offloaded; a frozen base stays on the device.
  const auto trained_fp32 = cfg.cpu_offload ? fp32.device(at::kCPU) : fp32;
  const auto& specs = layout.base_specs();
  const auto& trainable_specs = layout.trainable_specs();
  const auto unit_specs = model::model_units(layout.model());
  if (frozen) b.base_crc_rows.assign(specs.size(), runtime::CrcRow{});
  // Only this rank's bytes are read from a file; the seeded init is per parameter.
  const ReadPiece base_piece = [&](const FlatEntry& e, int64_t from, int64_t to) {
    if (weights) return weights->read_flat(e.name, from, to).to(at::kFloat);
    return model::init_param(specs[e.spec], seed, layout.model().initializer_range)
        .flatten()
        .narrow(0, from, to - from);
  };
  const ReadPiece trained_piece = [&](const FlatEntry& e, int64_t from, int64_t to) {
    if (trained)
      return trained->read_flat(layout.trained().trainable_key(e.name), from, to).to(at::kFloat);
    return layout.trained()
        .init_trainable(trainable_specs[e.spec], seed)
        .flatten()
        .narrow(0, from, to - from);
  };
  // A frozen base's checksum is taken in fp32, before any conversion.
  const SeePiece checksum = [&](const FlatEntry& e, const Segment& s, const at::Tensor& piece) {
    const auto c = piece.contiguous();
    const auto crc = static_cast<int64_t>(runtime::crc32_bytes(c.data_ptr(), c.nbytes()));
    b.base_crc_rows[e.spec] = {s.param_offset, s.numel, crc};
  };
  const auto n_units = static_cast<int64_t>(unit_specs.size());
  const UnitPart dense{experts.on() ? UnitPart::kDense : UnitPart::kAll};
  const int64_t local = layout.model().num_experts / experts.size;
  const UnitPart mine{UnitPart::kExperts, experts.rank * local, local};
  // A unit's pieces: what the optimizer steps and checkpoints hold; key: its gradient shard's.
  const auto add_pieces = [&b](const FlatUnit& unit, int rank, int64_t key) {
    for (const Segment& s : shard_segments(unit.layout(), rank)) {
      const auto& e = unit.layout().entries[s.entry];
      ShardPiece p;
      p.name = e.name;
      p.shape = e.shape;
      p.param_offset = s.param_offset;
      p.numel = s.numel;
      p.decay = e.decay;
      p.master = unit.master().narrow(0, s.shard_offset, s.numel);
      p.unit = key;
      p.shard_offset = s.shard_offset;
      b.pieces.push_back(std::move(p));
    }
  };
  for (int64_t u = 0; u < n_units; ++u) {
    FlatLayout base_layout = flat_layout(specs, u, shard_size, dense);
    at::Tensor master =
        fill_shard(base_layout, shard_rank,
                   (frozen ? fp32 : trained_fp32).dtype(layout.base_dtype(cfg.param_dtype)),
                   base_piece, frozen ? checksum : SeePiece());
    b.units.emplace_back(unit_specs[u], std::move(base_layout), master, frozen);
    b.units.back().set_merged(merged);
    if (frozen) {  // what trains: a second, small flat unit, sharded like the base
      FlatLayout trained_layout = flat_layout(trainable_specs, u, shard_size);
      at::Tensor shard = fill_shard(trained_layout, shard_rank, trained_fp32, trained_piece);
      b.adapters.emplace_back(unit_specs[u], std::move(trained_layout), shard);
    }
    FlatUnit& unit = frozen ? b.adapters.back() : b.units.back();
    if (cfg.cpu_offload) unit.offload_to_host(device, cfg.param_dtype);  // before the pieces' views
    add_pieces(unit, shard_rank, u);
    if (!experts.on()) continue;
    // This rank's experts, sharded over the ranks that hold the same ones.
    FlatLayout expert_layout = flat_layout(specs, u, experts.shard_size, mine);
    at::Tensor shard =
        fill_shard(expert_layout, experts.shard_rank,
                   (frozen ? fp32 : trained_fp32).dtype(layout.base_dtype(cfg.param_dtype)),
                   base_piece, frozen ? checksum : SeePiece());
    b.experts.emplace_back(unit_specs[u], std::move(expert_layout), shard, frozen);
    if (!frozen) add_pieces(b.experts.back(), experts.shard_rank, n_units + u);
  }
  return b;
}

}  // namespace shardtrain::fsdp
