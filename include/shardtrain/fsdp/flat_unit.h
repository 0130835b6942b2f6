// One FSDP unit at run time: this rank's fp32 master shard and gradient shard, and, only while
// the unit computes, the all-gathered full parameters as one autograd leaf in the compute dtype.
#pragma once
#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "shardtrain/comm/communicator.h"
#include "shardtrain/fsdp/flat_layout.h"
#include "shardtrain/model/gather_codec.h"

namespace shardtrain::fsdp {

class FlatUnit {
 public:
  // frozen (a base beside adapters): master is kept in the compute dtype and the gathered leaf does
  // not require grad, so autograd computes no weight gradient for it.
  FlatUnit(model::UnitSpec spec, FlatLayout layout, at::Tensor master, bool frozen = false);
  bool frozen() const { return frozen_; }
  bool empty() const { return layout_.padded == 0; }  // a unit without adapters
  const model::UnitSpec& spec() const { return spec_; }
  model::UnitKind kind() const { return spec_.kind; }
  const FlatLayout& layout() const { return layout_; }
  at::Tensor& master() {
    return master_;
  }  // fp32 [shard_numel] (frozen: compute dtype), persistent
  const at::Tensor& master() const { return master_; }
  at::Tensor& grad() { return grad_; }  // fp32 [shard_numel] during a step; undefined otherwise
  const at::Tensor& grad() const { return grad_; }

  // --cpu-offload: the master shard (already on the host) is pinned beside a CUDA `device`, with a
  // host gradient shard and a host mirror of the master in `dtype`, which the gather copies to
  // `device` (the mirror is refreshed whenever the master changed). Before any view of master().
  void offload_to_host(at::Device device, at::ScalarType dtype);
  bool offloaded() const { return mirror_.defined(); }
  // The host's fp32 gradient shard [shard_numel] (offloaded: what the optimizer steps with).
  at::Tensor& host_grad() { return host_grad_; }
  // Makes the mirror equal to the master if the master changed since (its version counter, which
  // copy_ bumps), or always (force): the fused AdamW kernel writes without bumping it.
  void refresh_mirror(bool force = false);

  // The layout's entries as the model side names them (what a gather codec is built from).
  std::vector<model::FlatPiece> pieces() const;
  // How the gathers travel when not in the leaf's dtype (model::RunPlan::gather_codec); nullptr:
  // as they are. The codec's statistics are gathered first, then its bytes, decoded by wait().
  void set_gather_codec(std::unique_ptr<model::GatherCodec> codec) { codec_ = std::move(codec); }
  bool coded_gather() const { return codec_ != nullptr; }

  // A fresh leaf [padded] in `dtype`, filled by an async all-gather of the master shards.
  void begin_gather(comm::Communicator& shard, at::ScalarType dtype);
  // Refills the same leaf's freed storage (before backward), so autograd's saved views see it.
  void begin_regather(comm::Communicator& shard);
  void wait();
  // Frees the leaf's storage but keeps the leaf and any graph built on it.
  void free_storage();
  bool gathered() const { return gathered_; }
  bool active() const { return flat_.defined(); }
  // A parameter by name, as a view of the leaf with its logical shape, from a split of its own
  // (the head's tied embedding: its gradient reaches the leaf apart from the embedding's).
  at::Tensor own_view(const std::string& name) const;
  // A parameter by name, from views bound once per leaf (one split, with grad whenever the leaf
  // takes one, so a recomputed forward differentiates through them). With merged projections, a
  // decoder layer's model::Merged groups are views of their own (merged_weight_name), and their
  // members views of those. Throws Error for a name the unit does not hold.
  const at::Tensor& view(const std::string& name) const;
  bool holds(const std::string& name) const { return index_.count(name) > 0; }
  // The fused layer path: q k v's and gate up's adjacent weights (and biases) as one view each.
  void set_merged(bool on);
  // The leaf's gradient [padded] (undefined if nothing flowed into it this pass).
  at::Tensor leaf_grad() const { return flat_.defined() ? flat_.grad() : at::Tensor(); }
  void release();  // drops the leaf, its gradient and its graph

 private:
  void start(comm::Communicator& shard);
  model::UnitSpec spec_;
  FlatLayout layout_;
  at::Tensor master_, grad_;
  at::Tensor mirror_, host_grad_;  // offloaded: on the host; the master too
  at::Device device_ = at::kCPU;   // where the gathered leaf lives
  int64_t mirror_version_ = -1;    // the master's version the mirror holds
  at::Tensor flat_;  // [padded] leaf, requires grad; storage present only while gathered
  at::Tensor send_;  // the master shard in the compute dtype, kept alive for the gather
  std::unique_ptr<model::GatherCodec> codec_;
  at::Tensor coded_;  // the codec's gathered bytes until wait() decodes them
  comm::WorkPtr pending_;
  bool gathered_ = false;
  bool frozen_ = false;
  struct PieceSize {  // one view of the split: an entry, or a merged group
    int64_t numel = 0;
    std::vector<int64_t> shape;
  };
  struct Slot {  // a name's view: its piece, or rows [row, row + rows) of it (rows < 0: the whole
                 // piece)
    size_t piece = 0;
    int64_t row = 0, rows = -1;
  };
  std::vector<PieceSize> pieces_;
  std::vector<Slot> slots_;
  std::unordered_map<std::string, size_t> index_;  // name -> slot, made once (set_merged)
  mutable std::vector<at::Tensor> views_;          // by slot, bound on first use, per leaf
  void bind_views() const;
};

}  // namespace shardtrain::fsdp
