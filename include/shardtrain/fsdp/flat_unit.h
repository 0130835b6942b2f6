// One FSDP unit at run time: this rank's fp32 master shard and gradient shard, and, only while
// the unit computes, the all-gathered full parameters as one autograd leaf in the compute dtype.
#pragma once
#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <vector>

#include "shardtrain/comm/communicator.h"
#include "shardtrain/fsdp/flat_layout.h"

namespace shardtrain::fsdp {

class FlatUnit {
 public:
  // frozen (a LoRA run's base): master is kept in the compute dtype and the gathered leaf does
  // not require grad, so autograd computes no weight gradient for it.
  FlatUnit(model::UnitSpec spec, FlatLayout layout, at::Tensor master, bool frozen = false);
  bool frozen() const { return frozen_; }
  bool empty() const { return layout_.padded == 0; }  // a unit without adapters
  const model::UnitSpec& spec() const { return spec_; }
  model::UnitKind kind() const { return spec_.kind; }
  const FlatLayout& layout() const { return layout_; }
  at::Tensor& master() { return master_; }  // fp32 [shard_numel] (frozen: compute dtype), persistent
  const at::Tensor& master() const { return master_; }
  at::Tensor& grad() { return grad_; }      // fp32 [shard_numel] during a step; undefined otherwise
  const at::Tensor& grad() const { return grad_; }

  // A fresh leaf [padded] in `dtype`, filled by an async all-gather of the master shards.
  void begin_gather(comm::Communicator& shard, at::ScalarType dtype);
  // Refills the same leaf's freed storage (before backward), so autograd's saved views see it.
  void begin_regather(comm::Communicator& shard);
  void wait();
  // Frees the leaf's storage but keeps the leaf and any graph built on it.
  void free_storage();
  bool gathered() const { return gathered_; }
  bool active() const { return flat_.defined(); }
  // The parameters by name, as views of the leaf with their logical shapes.
  std::map<std::string, at::Tensor> named_views() const;
  // The leaf's gradient [padded] (undefined if nothing flowed into it this pass).
  at::Tensor leaf_grad() const { return flat_.defined() ? flat_.grad() : at::Tensor(); }
  void release();  // drops the leaf, its gradient and its graph

 private:
  void start(comm::Communicator& shard);
  model::UnitSpec spec_;
  FlatLayout layout_;
  at::Tensor master_, grad_;
  at::Tensor flat_;  // [padded] leaf, requires grad; storage present only while gathered
  at::Tensor send_;  // the master shard in the compute dtype, kept alive for the gather
  comm::WorkPtr pending_;
  bool gathered_ = false;
  bool frozen_ = false;
};

}  // namespace shardtrain::fsdp
