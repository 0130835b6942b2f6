#include "shardtrain/fsdp/flat_unit.h"

#include <ATen/ATen.h>
#include <c10/core/StorageImpl.h>

#include <cstring>

#include "shardtrain/runtime/error.h"

namespace shardtrain::fsdp {

FlatUnit::FlatUnit(model::UnitSpec spec, FlatLayout layout, at::Tensor master, bool frozen)
    : spec_(spec), layout_(std::move(layout)), master_(std::move(master)), frozen_(frozen) {
  if (master_.numel() != layout_.shard_numel) throw runtime::Error("FSDP unit: master shard has the wrong size");
}

void FlatUnit::start(comm::Communicator& shard) {
  if (shard.size() == 1) {  // nothing to gather: cast into an alias with its own version counter, in one kernel
    at::from_blob(flat_.data_ptr(), {layout_.padded}, flat_.options().requires_grad(false)).copy_(master_);
  } else {
    send_ = master_.to(flat_.scalar_type());
    pending_ = shard.all_gather_async(send_, flat_);
  }
  gathered_ = true;
}

void FlatUnit::begin_gather(comm::Communicator& shard, at::ScalarType dtype) {
  release();
  flat_ = at::empty({layout_.padded}, master_.options().dtype(dtype)).requires_grad_(!frozen_);
  start(shard);
}

void FlatUnit::begin_regather(comm::Communicator& shard) {
  if (gathered_) return;
  if (!flat_.defined()) throw runtime::Error("FSDP unit: regather without a forward");
  auto* impl = flat_.storage().unsafeGetStorageImpl();
  const size_t nbytes = static_cast<size_t>(layout_.padded) * flat_.element_size();
  impl->set_data_ptr_noswap(impl->allocator()->allocate(nbytes));
  impl->set_nbytes(nbytes);
  start(shard);
}

void FlatUnit::wait() {
  if (pending_) {
    pending_->wait();
    pending_.reset();
  }
  send_ = at::Tensor();
}

void FlatUnit::free_storage() {
  wait();
  if (!flat_.defined() || !gathered_) return;
  auto* impl = flat_.storage().unsafeGetStorageImpl();
  impl->set_data_ptr_noswap(at::DataPtr(nullptr, flat_.device()));
  impl->set_nbytes(0);
  gathered_ = false;
}

std::map<std::string, at::Tensor> FlatUnit::named_views() const {
  // One split_with_sizes, not a narrow per parameter: narrow's backward allocates a zero-filled
  // tensor the size of the whole unit for each parameter and autograd adds them all up, where
  // split's backward concatenates the pieces' gradients once.
  std::vector<int64_t> sizes;
  for (const auto& e : layout_.entries) sizes.push_back(e.numel);
  if (layout_.padded > layout_.numel) sizes.push_back(layout_.padded - layout_.numel);
  const auto parts = flat_.split_with_sizes(sizes);
  std::map<std::string, at::Tensor> v;
  for (size_t i = 0; i < layout_.entries.size(); ++i) v.emplace(layout_.entries[i].name, parts[i].view(layout_.entries[i].shape));
  return v;
}

void FlatUnit::release() {
  free_storage();  // waits, and frees only what is gathered
  flat_ = at::Tensor();
}

}  // namespace shardtrain::fsdp
