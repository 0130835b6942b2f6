#include "shardtrain/fsdp/unit_schedule.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>

#include "shardtrain/cuda/nvtx.h"
#include "shardtrain/fsdp/memory_model.h"

namespace shardtrain::fsdp {

namespace {
// Each rank sends to the next and receives from the previous, on the context group's backend.
model::ContextRing context_ring(comm::Communicator& group) {
  model::ContextRing ring;
  ring.size = group.size();
  ring.rank = group.rank();
  const int next = (ring.rank + 1) % ring.size;
  const int prev = (ring.rank + ring.size - 1) % ring.size;
  ring.exchange = [&group, next, prev](const at::Tensor& send, const at::Tensor& recv) {
    std::shared_ptr<comm::Work> w = group.send_recv_async(send, next, recv, prev);
    return std::function<void()>([w] { w->wait(); });
  };
  return ring;
}

// Expert parallelism's group as the layers see it: rows to and from its ranks by all-to-all.
std::shared_ptr<const model::ExpertGroup> expert_group(comm::Communicator* group) {
  if (!group) return nullptr;
  auto g = std::make_shared<model::ExpertGroup>();
  g->size = group->size();
  g->rank = group->rank();
  g->exchange = [group](const at::Tensor& send, const std::vector<int64_t>& send_rows,
                        const at::Tensor& recv, const std::vector<int64_t>& recv_rows) {
    group->all_to_all_async(send, send_rows, recv, recv_rows)->wait();
  };
  return g;
}
}  // namespace

UnitSchedule::UnitSchedule(const model::ModelConfig& model, const ShardingConfig& cfg,
                           const model::RunPlan& plan, comm::ParallelDims& groups,
                           at::Device device, const TrainingSizes& sizes,
                           std::vector<FlatUnit> units, std::vector<FlatUnit> adapters,
                           std::function<void()> on_memory, std::vector<FlatUnit> experts)
    : model_(model),
      cfg_(cfg),
      plan_(plan),
      groups_(groups),
      device_(device),
      rope_(model_, model_.max_position_embeddings),
      ring_(context_ring(*groups.context)),
      units_(std::move(units)),
      adapters_(std::move(adapters)),
      experts_(std::move(experts)),
      expert_group_(expert_group(groups.expert.get())),
      on_memory_(std::move(on_memory)),
      reducer_(
          groups_, cfg_.reduce_dtype,
          [this](int64_t u) -> at::Tensor& { return trainable(u).grad(); }, on_memory_) {
  rope_.to(device_, cfg_.param_dtype);
  const std::vector<bool> runs = runs_backward(sizes);
  parts_.assign(units_.size(), UnitParts{});
  for (size_t u = 0; u < units_.size(); ++u) {
    UnitParts& p = parts_[u];
    p.base = &units_[u];
    units_[u].set_gather_codec(plan_.gather_codec(model_, units_[u].spec(), units_[u].pieces(),
                                                  units_[u].layout().padded, groups_.shard->size(),
                                                  groups_.shard->rank(), cfg_.param_dtype));
    if (!adapters_.empty() && !adapters_[u].empty()) p.adapter = &adapters_[u];
    if (!experts_.empty() && !experts_[u].empty()) p.experts = &experts_[u];
    p.trainable = adapters_.empty() ? &units_[u] : &adapters_[u];
    p.input_grad = u > 0 && runs[u - 1];  // a unit before it trains: its input needs a gradient
    p.runs_backward = runs[u];
    nvtx_names_.emplace_back("fwd unit " + std::to_string(u), "bwd unit " + std::to_string(u));
  }
  if (cfg_.no_sync_accumulation)
    for (int64_t k = 0; k < keys(); ++k)
      no_sync_.push_back(at::zeros({trainable(k).layout().padded},
                                   at::TensorOptions().dtype(at::kFloat).device(device_)));
  if (cfg_.cpu_offload) {
    std::vector<FlatUnit*> trained;
    for (auto& p : parts_) trained.push_back(p.trainable->empty() ? nullptr : p.trainable);
    offload_ = std::make_unique<HostOffload>(device_, std::move(trained));
    reducer_.set_on_added([this](int64_t u, bool last) { offload_->grad_to_host(u, last); });
  }
  const int reduce_elt = static_cast<int>(c10::elementSize(cfg_.reduce_dtype));
  reducer_.set_budget(reduce_budget(sizes.trainable_units(), groups_.shard->size(), reduce_elt));
}

FlatUnit& UnitSchedule::trainable(int64_t u) {
  const auto n = static_cast<int64_t>(units_.size());
  return u < n ? *parts_[u].trainable : experts_[u - n];
}

const FlatUnit& UnitSchedule::trainable(int64_t u) const {
  const auto n = static_cast<int64_t>(units_.size());
  return u < n ? *parts_[u].trainable : experts_[u - n];
}

int64_t UnitSchedule::keys() const {
  // The experts train with the base (a frozen base's are frozen too).
  const bool experts_train = !experts_.empty() && adapters_.empty();
  return static_cast<int64_t>(units_.size()) * (experts_train ? 2 : 1);
}

comm::Communicator* UnitSchedule::reduce_group(int64_t key) const {
  return key >= static_cast<int64_t>(units_.size()) ? groups_.expert_shard.get() : nullptr;
}

void UnitSchedule::reduce_unit(int64_t u, const at::Tensor& full_grad, bool owned, bool last) {
  reducer_.reduce(u, full_grad, trainable(u).layout().shard_numel, owned, last, reduce_group(u));
}

void UnitSchedule::reduce_accumulated() {
  for (int64_t k = 0; k < keys(); ++k)
    if (!trainable(k).empty())
      reduce_unit(k, no_sync_[static_cast<size_t>(k)], /*owned=*/false, /*last=*/true);
  reducer_.finish();  // the buffers are read by the reductions until they complete
  for (auto& b : no_sync_) b.zero_();
}

void UnitSchedule::finish_reductions() { reducer_.finish(); }

void UnitSchedule::release_grads() {
  for (int64_t k = 0; k < keys(); ++k) trainable(k).grad() = at::Tensor();
}

void UnitSchedule::release_all() {
  for (auto* units : {&units_, &adapters_, &experts_})
    for (auto& u : *units) u.release();
}

void UnitSchedule::note_gathered() {
  int n = 0;
  for (const auto& unit : units_) n += unit.gathered();
  peak_gathered_ = std::max(peak_gathered_, n);
  on_memory_();
}

int64_t UnitSchedule::transient_bytes() const {
  int64_t b = 0;
  const int elt = static_cast<int>(c10::elementSize(cfg_.param_dtype));
  for (const auto* units : {&units_, &adapters_, &experts_})
    for (const auto& u : *units) {
      if (u.gathered()) b += gathered_bytes(u.layout().padded, elt);
      if (u.grad().defined()) b += u.grad().nbytes();
    }
  return b + reducer_.bytes_in_flight() + (offload_ ? offload_->device_bytes() : 0);
}

void UnitSchedule::prefetch(int64_t u) {
  if (u < 0 || u >= static_cast<int64_t>(units_.size())) return;
  if (backward_ && !parts_[u].runs_backward) return;  // a frozen embedding's backward is skipped
  if (offload_) offload_->wait_stepped(u);  // the host's step of its master, and its mirror
  for_each_part(u, [this](FlatUnit& unit, comm::Communicator& group) {
    if (!unit.active())
      unit.begin_gather(group, cfg_.param_dtype);
    else if (!unit.gathered())
      unit.begin_regather(group);
  });
}

void UnitSchedule::ensure(int64_t u) {
  prefetch(u);
  for_each_part(u, [](FlatUnit& unit, comm::Communicator&) {
    unit.wait();
  });  // (a frozen embedding in backward was never gathered)
  note_gathered();
}

void UnitSchedule::prefetch_from(int64_t u, int direction) {
  if (!cfg_.prefetch) return;
  for (int k = 1; k < cfg_.max_inflight_gathers; ++k) prefetch(u + direction * k);
  note_gathered();
}

bool UnitSchedule::recomputes(int64_t u) const {
  return units_[u].kind() == model::UnitKind::kDecoderLayer &&
         cfg_.activation_checkpointing.full(units_[u].spec().layer);
}

void UnitSchedule::gather_tied_embedding() {
  FlatUnit& e =
      units_.front();  // not prefetch(): a frozen embedding is needed here in backward too
  if (offload_) offload_->wait_stepped(0);
  if (!e.active())
    e.begin_gather(*groups_.shard, cfg_.param_dtype);
  else if (!e.gathered())
    e.begin_regather(*groups_.shard);
  e.wait();
  note_gathered();
}

bool UnitSchedule::reads_embedding(int64_t u) const {
  return model_.tie_word_embeddings && units_[u].kind() == model::UnitKind::kHead;
}

at::Tensor UnitSchedule::lm_head_view() const {
  const FlatUnit& owner = model_.tie_word_embeddings ? units_.front() : units_.back();
  return owner.own_view(model::names::lm_head(model_));
}

at::Tensor UnitSchedule::run_unit(int64_t u, const at::Tensor& x, const Pass& p) {
  const FlatUnit& unit = units_[u];
  at::Tensor
      tied;  // the head's tied embedding: a split of its own, one leaf: both gradients add up in it
  if (reads_embedding(u)) tied = lm_head_view();
  const FlatUnit* experts = parts_[u].experts;
  const auto lookup = [&unit, &tied, experts](const std::string& name) -> at::Tensor {
    if (tied.defined() && name == model::names::kEmbed) return tied;
    return experts && experts->holds(name) ? experts->view(name) : unit.view(name);
  };
  // Selective checkpointing: the layer's norms and activation keep only their inputs
  // (model/checkpointed.h).
  const bool selective = unit.kind() == model::UnitKind::kDecoderLayer &&
                         cfg_.activation_checkpointing.selective(unit.spec().layer);
  const FlatUnit* adapters = parts_[u].adapter;
  const model::WeightLookup adapter_views = [adapters](const std::string& name) {
    return adapters->view(name);
  };
  return plan_.unit(model_, unit.spec(), lookup, adapters ? &adapter_views : nullptr, x, p.unit,
                    cfg_.param_dtype, selective);
}

at::Tensor UnitSchedule::serve_experts(int64_t u) {
  const FlatUnit& unit = units_[u];
  const FlatUnit& experts = *parts_[u].experts;
  const auto lookup = [&unit, &experts](const std::string& name) -> at::Tensor {
    return experts.holds(name) ? experts.view(name) : unit.view(name);
  };
  return plan_.serve_experts(model_, unit.spec(), lookup, *expert_group_, cfg_.param_dtype,
                             device_);
}

at::Tensor UnitSchedule::forward(Pass& p, const at::Tensor& tokens, const at::Tensor& positions,
                                 bool build_graph, const model::ContextShard* share) {
  const bool reshard = reshard_after_forward(cfg_.sharding);
  p.inputs.assign(units_.size(), at::Tensor());
  p.outputs.assign(units_.size(), at::Tensor());
  p.empty = tokens.size(0) == 0;
  p.unit.train = build_graph;
  if (!p.empty) {
    plan_.lay_out(p.unit, model_, rope_, tokens, positions, share, ring_, device_,
                  cfg_.param_dtype);
    p.unit.layout.experts = expert_group_;
  }
  at::Tensor x = tokens;
  for (int64_t u = 0; u < static_cast<int64_t>(units_.size()); ++u) {
    cuda::NvtxRange range(nvtx_names_[u].first);
    ensure(u);
    if (reads_embedding(u)) gather_tied_embedding();
    prefetch_from(u, +1);
    if (!p.empty) {
      at::AutoGradMode mode(build_graph && !recomputes(u));
      // The graph is cut here: the unit's input is a leaf whose gradient backward hands on (not
      // to a frozen embedding, which needs none).
      if (units_[u].kind() != model::UnitKind::kEmbedding) {
        x = build_graph ? x.detach().requires_grad_(parts_[u].input_grad) : x;
        p.inputs[u] = x;
      }
      const bool fused = p.fused_head && units_[u].kind() == model::UnitKind::kHead;
      if (fused) {
        // One split for the norm and lm_head (the unit's bound views): two would each build a
        // whole-unit gradient in backward.
        p.head_weight =
            reads_embedding(u) ? lm_head_view() : units_[u].view(model::names::lm_head(model_));
        p.outputs[u] = plan_.head_norm(model_, x, units_[u].view(model::names::kNorm));
        x = p.outputs[u];
      } else {
        p.outputs[u] = run_unit(u, x, p);
        x = p.outputs[u];
      }
    } else if (parts_[u].experts) {  // no rows here, but the other ranks' tokens need its experts
      at::AutoGradMode mode(build_graph && !recomputes(u));
      p.outputs[u] = serve_experts(u);
    }
    // The head's backward follows at once: like FSDP2's root, it (and a tied embedding) stays
    // gathered until then; so does a fused head the caller applies (release_all frees it).
    const bool head = units_[u].kind() == model::UnitKind::kHead;
    const bool keep_head = head && (build_graph || p.fused_head);
    if ((!build_graph && !keep_head) || (reshard && !head))
      for_each_part(u, [](FlatUnit& unit, comm::Communicator&) { unit.free_storage(); });
    if (reads_embedding(u) && !keep_head) units_.front().free_storage();
  }
  return x;
}

void UnitSchedule::backward(Pass& p, const at::Tensor& loss, bool reduce_now, bool last) {
  at::Tensor grad_out;
  backward_ = true;
  for (int64_t u = static_cast<int64_t>(units_.size()) - 1; u >= 0; --u) {
    cuda::NvtxRange range(nvtx_names_[u].second);
    ensure(u);
    if (reads_embedding(u)) gather_tied_embedding();
    prefetch_from(u, -1);
    if (!p.empty &&
        parts_[u].runs_backward) {  // a frozen embedding trains nothing and needs no input gradient
      if (units_[u].kind() == model::UnitKind::kHead) {
        loss.backward();
      } else {
        at::Tensor out = p.outputs[u];
        if (recomputes(u)) {  // recompute with the regathered weights
          at::AutoGradMode on(true);
          out = run_unit(u, p.inputs[u], p);
        }
        torch::autograd::backward({out}, {grad_out});
      }
      if (units_[u].kind() != model::UnitKind::kEmbedding) grad_out = p.inputs[u].grad();
    } else if (p.empty && parts_[u].experts && parts_[u].runs_backward) {
      at::Tensor out = p.outputs[u];
      if (recomputes(u)) {
        at::AutoGradMode on(true);
        out = serve_experts(u);
      }
      // The others' tokens' gradients come and go through this rank's experts.
      torch::autograd::backward({out}, {at::zeros_like(out)});
    }
    // The base, or the unit's adapters beside a frozen one; then its experts where they train.
    for (const int64_t key : {u, static_cast<int64_t>(units_.size()) + u}) {
      if (key >= keys() || trainable(key).empty()) continue;
      FlatUnit& t = trainable(key);
      at::Tensor g = t.leaf_grad();
      if (!g.defined())
        g = at::zeros({t.layout().padded},
                      at::TensorOptions().dtype(cfg_.param_dtype).device(device_));
      if (reduce_now)
        reduce_unit(key, g, /*owned=*/true, last);
      else
        no_sync_[static_cast<size_t>(key)].add_(g.to(at::kFloat));
    }
    p.outputs[u] = at::Tensor();
    p.inputs[u] = at::Tensor();
    for_each_part(u, [](FlatUnit& unit, comm::Communicator&) { unit.release(); });
    // A tied embedding keeps the head's gradient in its leaf until its own backward adds to it.
    if (reads_embedding(u) && reshard_after_forward(cfg_.sharding)) units_.front().free_storage();
  }
  backward_ = false;
}

}  // namespace shardtrain::fsdp
