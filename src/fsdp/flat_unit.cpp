#include "shardtrain/fsdp/flat_unit.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/core/StorageImpl.h>

#include <algorithm>
#include <cstring>

#include "shardtrain/fsdp/host_memory.h"
#include "shardtrain/model/projections.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::fsdp {

FlatUnit::FlatUnit(model::UnitSpec spec, FlatLayout layout, at::Tensor master, bool frozen)
    : spec_(spec),
      layout_(std::move(layout)),
      master_(std::move(master)),
      device_(master_.device()),
      frozen_(frozen) {
  if (master_.numel() != layout_.shard_numel)
    throw runtime::Error("FSDP unit: master shard has the wrong size");
  set_merged(false);
}

void FlatUnit::offload_to_host(at::Device device, at::ScalarType dtype) {
  if (!master_.device().is_cpu()) throw runtime::Error("FSDP unit: offload a master on the host");
  device_ = device;
  // Pinned beside a GPU: the copies either way are DMA, and non_blocking really does not block.
  const bool pin = device.is_cuda();
  if (pin) {
    at::Tensor pinned = host_tensor(layout_.shard_numel, master_.scalar_type(), true);
    master_ = pinned.copy_(master_);
  }
  mirror_ = host_tensor(layout_.shard_numel, dtype, pin);
  host_grad_ = host_tensor(layout_.shard_numel, at::kFloat, pin);
  refresh_mirror();
}

void FlatUnit::refresh_mirror(bool force) {
  if (!offloaded() || (!force && master_._version() == mirror_version_)) return;
  mirror_.copy_(master_);
  mirror_version_ = static_cast<int64_t>(master_._version());
}

void FlatUnit::start(comm::Communicator& shard) {
  at::Tensor shard_src = master_;
  if (offloaded()) {  // the host mirror, already in the compute dtype, to the device
    refresh_mirror();
    if (shard.size() > 1) {
      shard_src = at::empty({layout_.shard_numel}, flat_.options().requires_grad(false));
      shard_src.copy_(mirror_, /*non_blocking=*/true);
    } else {
      shard_src = mirror_;
    }
  }
  if (shard.size() ==
      1) {  // nothing to gather: cast into an alias with its own version counter, in one kernel
    at::from_blob(flat_.data_ptr(), {layout_.padded}, flat_.options().requires_grad(false))
        .copy_(shard_src, /*non_blocking=*/offloaded());
  } else if (codec_) {
    const at::Tensor stats = codec_->statistics(shard_src);
    const at::Tensor all = at::empty({stats.numel() * shard.size()}, stats.options());
    shard.all_gather_async(stats, all)->wait();  // every rank encodes with the same statistics
    const auto bytes = flat_.options().dtype(at::kByte).requires_grad(false);
    send_ = at::empty({codec_->send_bytes()}, bytes);
    codec_->encode(shard_src, all, send_);
    coded_ = at::empty({codec_->send_bytes() * shard.size()}, bytes);
    pending_ = shard.all_gather_async(send_, coded_);
  } else {
    send_ = shard_src.to(flat_.scalar_type());
    pending_ = shard.all_gather_async(send_, flat_);
  }
  gathered_ = true;
}

std::vector<model::FlatPiece> FlatUnit::pieces() const {
  std::vector<model::FlatPiece> out;
  for (const FlatEntry& e : layout_.entries) out.push_back({e.name, e.offset, e.numel});
  return out;
}

void FlatUnit::begin_gather(comm::Communicator& shard, at::ScalarType dtype) {
  release();  // a fresh leaf: views bound again
  flat_ = at::empty({layout_.padded}, at::TensorOptions().dtype(dtype).device(device_))
              .requires_grad_(!frozen_);
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
  if (coded_.defined()) {  // into an alias of the leaf with its own version counter, as start's
    codec_->decode(coded_, at::from_blob(flat_.data_ptr(), {layout_.padded},
                                         flat_.options().requires_grad(false)));
    coded_ = at::Tensor();
  }
}

void FlatUnit::free_storage() {
  wait();
  if (!flat_.defined() || !gathered_) return;
  auto* impl = flat_.storage().unsafeGetStorageImpl();
  impl->set_data_ptr_noswap(at::DataPtr(nullptr, flat_.device()));
  impl->set_nbytes(0);
  gathered_ = false;
}

namespace {

// Runs of layout entries that make one view: a merged group whose members lie side by side, or one
// entry.
struct Piece {
  size_t first = 0, count = 1;
  std::string name;            // the group's merged name; empty for a single entry
  std::vector<int64_t> shape;  // the group's: members stacked along their first dimension
};

// The model::Merged groups (weights, then biases) of a decoder layer whose members lie side by
// side.
std::vector<Piece> merged_groups(const FlatLayout& layout, int64_t layer) {
  std::unordered_map<std::string, size_t> at;
  for (size_t i = 0; i < layout.entries.size(); ++i) at.emplace(layout.entries[i].name, i);
  std::vector<Piece> groups;
  for (const model::Merged m : model::kMerged) {
    for (const bool bias : {false, true}) {
      Piece g;
      g.name = bias ? model::merged_bias_name(layer, m) : model::merged_weight_name(layer, m);
      g.count = 0;
      bool adjacent = true;
      for (const model::Proj p : model::merged_members(m)) {
        const auto it =
            at.find(bias ? model::proj_bias_name(layer, p) : model::proj_weight_name(layer, p));
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
  return groups;
}

}  // namespace

void FlatUnit::set_merged(bool on) {
  // Names resolve to slots here, once: a gather only splits and views (bind_views).
  std::vector<Piece> groups;
  if (on && spec_.kind == model::UnitKind::kDecoderLayer)
    groups = merged_groups(layout_, spec_.layer);
  pieces_.clear();
  slots_.clear();
  index_.clear();
  for (size_t i = 0; i < layout_.entries.size();) {
    const auto g =
        std::find_if(groups.begin(), groups.end(), [i](const Piece& p) { return p.first == i; });
    const Piece piece = g != groups.end() ? *g : Piece{i, 1, "", layout_.entries[i].shape};
    int64_t numel = 0;
    int64_t row = 0;
    if (!piece.name.empty()) {
      index_.emplace(piece.name, slots_.size());
      slots_.push_back({pieces_.size(), 0, -1});
    }
    for (size_t k = 0; k < piece.count; ++k) {
      const FlatEntry& e = layout_.entries[piece.first + k];
      index_.emplace(e.name, slots_.size());
      // A group's member is rows of the group's view (only a member with an adapter reads it); -1:
      // the whole piece.
      slots_.push_back({pieces_.size(), row, piece.name.empty() ? -1 : e.shape[0]});
      row += e.shape[0];
      numel += e.numel;
    }
    pieces_.push_back({numel, piece.shape});
    i += piece.count;
  }
  views_.clear();
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

void FlatUnit::bind_views() const {
  std::vector<int64_t> sizes;
  for (const PieceSize& p : pieces_) sizes.push_back(p.numel);
  if (layout_.padded > layout_.numel) sizes.push_back(layout_.padded - layout_.numel);
  // Bound with grad: a unit whose forward runs without it (full checkpointing) recomputes through
  // these.
  at::AutoGradMode grad(flat_.requires_grad());
  const auto parts = flat_.split_with_sizes(sizes);  // one split: its backward concatenates once
  std::vector<at::Tensor> whole;
  for (size_t k = 0; k < pieces_.size(); ++k) whole.push_back(parts[k].view(pieces_[k].shape));
  views_.clear();
  for (const Slot& s : slots_)
    views_.push_back(s.rows < 0 ? whole[s.piece] : whole[s.piece].narrow(0, s.row, s.rows));
}

const at::Tensor& FlatUnit::view(const std::string& name) const {
  const auto it = index_.find(name);
  if (it == index_.end())
    throw runtime::Error("FSDP unit " + std::to_string(spec_.layer) + " holds no parameter " +
                         name);
  if (views_.empty()) bind_views();
  return views_[it->second];
}

void FlatUnit::release() {
  free_storage();  // waits, and frees only what is gathered
  flat_ = at::Tensor();
  views_.clear();
}

}  // namespace shardtrain::fsdp
