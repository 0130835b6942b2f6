#include "shardtrain/fsdp/flat_unit.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/core/StorageImpl.h>

#include <algorithm>
#include <cstring>

#include "shardtrain/model/projections.h"
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
  release();  // a fresh leaf: views bound again
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

at::Tensor FlatUnit::own_view(const std::string& name) const {
  // One split_with_sizes, not a narrow: narrow's backward allocates a zero-filled tensor the size
  // of the whole unit, where split's concatenates the pieces' gradients once.
  std::vector<int64_t> sizes;
  for (const auto& e : layout_.entries) sizes.push_back(e.numel);
  if (layout_.padded > layout_.numel) sizes.push_back(layout_.padded - layout_.numel);
  const auto parts = flat_.split_with_sizes(sizes);
  for (size_t i = 0; i < layout_.entries.size(); ++i)
    if (layout_.entries[i].name == name) return parts[i].view(layout_.entries[i].shape);
  throw runtime::Error("FSDP unit " + std::to_string(spec_.layer) + " holds no parameter " + name);
}

namespace {

// Runs of layout entries that make one view: a merged group whose members lie side by side, or one entry.
struct Piece {
  size_t first = 0, count = 1;
  std::string name;             // the group's merged name; empty for a single entry
  std::vector<int64_t> shape;   // the group's: members stacked along their first dimension
};

std::vector<Piece> pieces(const FlatLayout& layout, const model::UnitSpec& spec, bool merged) {
  std::unordered_map<std::string, size_t> at;
  for (size_t i = 0; i < layout.entries.size(); ++i) at.emplace(layout.entries[i].name, i);
  std::vector<Piece> groups;
  if (merged && spec.kind == model::UnitKind::kDecoderLayer) {
    for (const model::Merged m : model::kMerged) {
      for (const bool bias : {false, true}) {
        Piece g;
        g.name = bias ? model::merged_bias_name(spec.layer, m) : model::merged_weight_name(spec.layer, m);
        g.count = 0;
        bool adjacent = true;
        for (const model::Proj p : model::merged_members(m)) {
          const auto it = at.find(bias ? model::proj_bias_name(spec.layer, p) : model::proj_weight_name(spec.layer, p));
          adjacent = it != at.end() && (g.count == 0 || it->second == g.first + g.count);
          if (!adjacent) break;
          const FlatEntry& e = layout.entries[it->second];
          if (g.count == 0) {
            g.first = it->second;
            g.shape = e.shape;
            g.shape[0] = 0;
          }
          g.shape[0] += e.shape[0];
          ++g.count;
        }
        if (adjacent) groups.push_back(g);
      }
    }
  }
  std::vector<Piece> out;
  for (size_t i = 0; i < layout.entries.size();) {
    const auto g = std::find_if(groups.begin(), groups.end(), [i](const Piece& p) { return p.first == i; });
    out.push_back(g != groups.end() ? *g : Piece{i, 1, "", layout.entries[i].shape});
    i += out.back().count;
  }
  return out;
}

}  // namespace

void FlatUnit::bind_views() const {
  const std::vector<Piece> ps = pieces(layout_, spec_, merged_);
  std::vector<int64_t> sizes;
  for (const Piece& p : ps) {
    int64_t n = 0;
    for (size_t k = 0; k < p.count; ++k) n += layout_.entries[p.first + k].numel;
    sizes.push_back(n);
  }
  if (layout_.padded > layout_.numel) sizes.push_back(layout_.padded - layout_.numel);
  // Bound with grad: a unit whose forward runs without it (full checkpointing) recomputes through these.
  at::AutoGradMode grad(flat_.requires_grad());
  const auto parts = flat_.split_with_sizes(sizes);  // one split: its backward concatenates once
  for (size_t k = 0; k < ps.size(); ++k) {
    const at::Tensor whole = parts[k].view(ps[k].shape);
    if (ps[k].name.empty()) {
      views_.emplace(layout_.entries[ps[k].first].name, whole);
      continue;
    }
    views_.emplace(ps[k].name, whole);
    int64_t row = 0;
    for (size_t m = 0; m < ps[k].count; ++m) {
      const FlatEntry& e = layout_.entries[ps[k].first + m];
      views_.emplace(e.name, whole.narrow(0, row, e.shape[0]));  // only a LoRA-targeted member reads it
      row += e.shape[0];
    }
  }
}

const at::Tensor& FlatUnit::view(const std::string& name) const {
  if (views_.empty()) bind_views();
  const auto it = views_.find(name);
  if (it == views_.end()) throw runtime::Error("FSDP unit " + std::to_string(spec_.layer) + " holds no parameter " + name);
  return it->second;
}

void FlatUnit::release() {
  free_storage();  // waits, and frees only what is gathered
  flat_ = at::Tensor();
  views_.clear();
}

}  // namespace shardtrain::fsdp
