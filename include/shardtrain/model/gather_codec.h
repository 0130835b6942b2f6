// A unit's all-gather in a form other than the compute dtype, chosen on the model side (the run
// plan) and run by the sharding layer without looking inside: each rank's statistics are gathered
// first (what every rank must agree on, such as a scale), then each rank encodes its shard into
// the bytes it sends, and the gathered bytes are decoded into the unit's flat buffer.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace shardtrain::model {

// One parameter of a unit's flat buffer: its elements [offset, offset + numel).
struct FlatPiece {
  std::string name;
  int64_t offset = 0, numel = 0;
};

class GatherCodec {
 public:
  virtual ~GatherCodec() = default;
  virtual int64_t send_bytes() const = 0;  // per rank, the same on every rank
  // This rank's statistics of its shard [shard_numel] (any float dtype): fp32 [stat_count()].
  virtual int64_t stat_count() const = 0;
  virtual at::Tensor statistics(const at::Tensor& shard) const = 0;
  // all_stats: every rank's statistics, [ranks * stat_count()] in rank order; send: uint8
  // [send_bytes()], written.
  virtual void encode(const at::Tensor& shard, const at::Tensor& all_stats,
                      const at::Tensor& send) = 0;
  // gathered: uint8 [ranks * send_bytes()], rank r's at r * send_bytes(); full: the unit's flat
  // buffer [padded] in the compute dtype (no autograd), written whole. After encode.
  virtual void decode(const at::Tensor& gathered, const at::Tensor& full) const = 0;
};

// The float8 all-gather of tensorwise --fp8 (torchao's enable_fsdp_float8_all_gather): the
// pieces with a scale group (>= 0; pieces of one group share a scale) travel as e4m3 with one
// scale per group from the amax over every rank, the rest in `dtype`. Decoded, a weight is its
// float8 value over its scale in `dtype`: the float8 linear's cast of it gives back the same
// float8 values and scale, so training equals the gather in `dtype` while the projections'
// bytes on the wire halve (bf16). padded: the flat buffer's size, shard_size ranks dividing it.
std::unique_ptr<GatherCodec> fp8_gather_codec(std::vector<FlatPiece> pieces,
                                              std::vector<int> scale_group, int64_t padded,
                                              int shard_size, int shard_rank, at::ScalarType dtype);

}  // namespace shardtrain::model
