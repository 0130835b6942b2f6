#include "shardtrain/model/gather_codec.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "shardtrain/cuda/kernels/fp8_math.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::model {
namespace {

namespace kn = shardtrain::cuda::kernels;

int64_t round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

// A piece's elements inside one rank's shard.
struct Seg {
  int group = -1;    // its scale group; -1: sent in the compute dtype
  int64_t flat = 0;  // where it starts in the flat buffer
  int64_t numel = 0;
  int64_t extra = 0;  // group -1: where it starts among the rank's extras
};

class Fp8GatherCodec final : public GatherCodec {
 public:
  Fp8GatherCodec(std::vector<FlatPiece> pieces, std::vector<int> groups, int64_t padded,
                 int shard_size, int shard_rank, at::ScalarType dtype)
      : padded_(padded),
        shard_(padded / shard_size),
        ranks_(shard_size),
        rank_(shard_rank),
        dtype_(dtype) {
    if (pieces.size() != groups.size() || padded % shard_size != 0)
      throw runtime::Error("fp8 gather: pieces, groups and shards do not match");
    for (int g : groups) groups_ = std::max(groups_, g + 1);
    segs_.resize(ranks_);
    int64_t most_extras = 0;
    for (int r = 0; r < ranks_; ++r) {
      const int64_t lo = r * shard_, hi = lo + shard_;
      int64_t extras = 0;
      for (size_t p = 0; p < pieces.size(); ++p) {
        const int64_t a = std::max(lo, pieces[p].offset);
        const int64_t b = std::min(hi, pieces[p].offset + pieces[p].numel);
        if (a >= b) continue;
        segs_[r].push_back({groups[p], a, b - a, groups[p] < 0 ? extras : 0});
        if (groups[p] < 0) extras += b - a;
      }
      most_extras = std::max(most_extras, extras);
    }
    for (const FlatPiece& p : pieces) numel_ = std::max(numel_, p.offset + p.numel);
    codes_ = round_up(shard_, 8);
    extras_ = most_extras;
    send_ = codes_ + round_up(extras_ * static_cast<int64_t>(c10::elementSize(dtype_)), 8);
  }

  int64_t send_bytes() const override { return send_; }
  int64_t stat_count() const override { return groups_; }

  at::Tensor statistics(const at::Tensor& shard) const override {
    const at::Tensor x = shard.to(dtype_);
    at::Tensor amax = at::zeros({groups_}, x.options().dtype(at::kFloat));
    for (const Seg& s : segs_[rank_]) {
      if (s.group < 0) continue;
      at::Tensor g = amax.narrow(0, s.group, 1);
      const at::Tensor m =
          x.narrow(0, s.flat - rank_ * shard_, s.numel).abs().amax().to(at::kFloat);
      g.copy_(at::maximum(g, m.view({1})));  // NaN stays NaN, as torch.amax keeps it
    }
    return amax;
  }

  void encode(const at::Tensor& shard, const at::Tensor& all_stats,
              const at::Tensor& send) override {
    // The group's amax over every rank, then fp8_math.h's scale: the float8 linear's, exactly.
    const double max = kn::fp8_max(kn::Fp8Format::kE4M3);
    const at::Tensor amax = all_stats.view({ranks_, groups_}).amax(0);
    scale_ = at::div(at::scalar_tensor(max, amax.options()), amax.clamp_min(kn::kFp8AmaxFloor));
    inv_ = scale_.reciprocal();
    const at::Tensor x = shard.to(dtype_);
    const at::Tensor codes = send.narrow(0, 0, shard_).view(at::kFloat8_e4m3fn);
    const at::Tensor extras = extras_view(send, 0);
    for (const Seg& s : segs_[rank_]) {
      const at::Tensor v = x.narrow(0, s.flat - rank_ * shard_, s.numel);
      if (s.group < 0) {
        extras.narrow(0, s.extra, s.numel).copy_(v);
        continue;
      }
      codes.narrow(0, s.flat - rank_ * shard_, s.numel)
          .copy_((v.to(at::kFloat) * scale_.narrow(0, s.group, 1)).clamp(-max, max));
    }
  }

  void decode(const at::Tensor& gathered, const at::Tensor& full) const override {
    full.narrow(0, numel_, padded_ - numel_).zero_();
    for (int r = 0; r < ranks_; ++r) {
      const at::Tensor codes = gathered.narrow(0, r * send_ + 0, shard_).view(at::kFloat8_e4m3fn);
      const at::Tensor extras = extras_view(gathered, r * send_);
      for (const Seg& s : segs_[r]) {
        at::Tensor out = full.narrow(0, s.flat, s.numel);
        if (s.group < 0)
          out.copy_(extras.narrow(0, s.extra, s.numel));
        else
          out.copy_(codes.narrow(0, s.flat - r * shard_, s.numel).to(at::kFloat) *
                    inv_.narrow(0, s.group, 1));
      }
    }
  }

 private:
  // A rank's extras, in the compute dtype, from the bytes at `base`.
  at::Tensor extras_view(const at::Tensor& bytes, int64_t base) const {
    const int64_t e = static_cast<int64_t>(c10::elementSize(dtype_));
    return bytes.narrow(0, base + codes_, extras_ * e).view(dtype_);
  }

  int64_t padded_, shard_;
  int ranks_, rank_;
  at::ScalarType dtype_;
  int groups_ = 0;
  int64_t numel_ = 0, codes_ = 0, extras_ = 0, send_ = 0;
  std::vector<std::vector<Seg>> segs_;  // [ranks] each rank's pieces in its shard
  at::Tensor scale_, inv_;              // [groups] fp32, from the last encode
};

}  // namespace

std::unique_ptr<GatherCodec> fp8_gather_codec(std::vector<FlatPiece> pieces,
                                              std::vector<int> scale_group, int64_t padded,
                                              int shard_size, int shard_rank,
                                              at::ScalarType dtype) {
  return std::make_unique<Fp8GatherCodec>(std::move(pieces), std::move(scale_group), padded,
                                          shard_size, shard_rank, dtype);
}

}  // namespace shardtrain::model
