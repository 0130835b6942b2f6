#include "shardtrain/fsdp/engine.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <cmath>

#include "shardtrain/cuda/nvtx.h"
#include "shardtrain/fsdp/memory_model.h"
#include "shardtrain/fsdp/phase_clock.h"
#include "shardtrain/model/lm_loss.h"
#ifdef SHARDTRAIN_HAVE_CUDA
#include "shardtrain/cuda/device_memory.h"
#endif
#include "shardtrain/runtime/checksum.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::fsdp {

using comm::Communicator;

// Per micro-batch: the detached input leaf and the output of every unit, [units].
struct FsdpEngine::Pass {
  std::vector<at::Tensor> inputs, outputs;
  bool empty = false;  // this rank has no rows: it still joins every collective
  bool train = false;  // LoRA dropout applies
  uint64_t dropout_seed = 0;  // the same in forward and in activation checkpointing's recompute
  bool fused_head = false;  // the head returns the final norm's output; the loss applies lm_head (lm_loss.h)
};

FsdpEngine::FsdpEngine(ModelConfig model, FsdpConfig cfg, comm::ProcessGroups& groups, uint64_t seed,
                       const SafetensorsModel* weights, at::Device device, const SafetensorsModel* adapters)
    : model_(std::move(model)), cfg_(std::move(cfg)), groups_(groups), device_(device),
      rope_(model_, model_.max_position_embeddings), seed_(seed), peaks_([this] { return read_and_reset_peak(); }) {
  cfg_.validate();
  if (cfg_.param_dtype == at::ScalarType::Undefined) cfg_.param_dtype = device_.is_cuda() ? at::kBFloat16 : at::kFloat;
  rope_.to(device_, cfg_.param_dtype);
  const auto fp32 = at::TensorOptions().dtype(at::kFloat).device(device_);
  const auto specs = llama_param_specs(model_);
  const auto unit_specs = model_units(model_);
  const int S = groups_.shard->size(), sr = groups_.shard->rank();
  // A LoRA run's base is frozen: no fp32 master, only the compute dtype.
  const auto base_options = lora() ? fp32.dtype(cfg_.param_dtype) : fp32;
  trainable_specs_ = lora() ? lora_param_specs(model_, cfg_.lora) : specs;
  if (lora()) base_crc_rows_.assign(specs.size() * 3, -1);
  for (int64_t u = 0; u < static_cast<int64_t>(unit_specs.size()); ++u) {
    nvtx_names_.emplace_back("fwd unit " + std::to_string(u), "bwd unit " + std::to_string(u));
    FlatLayout layout = flat_layout(specs, u, S);
    auto master = at::zeros({layout.shard_numel}, base_options);
    for (const Segment& s : shard_segments(layout, sr)) {
      const auto& e = layout.entries[s.entry];
      // Only this rank's bytes are read from the file; the seeded init is per parameter.
      at::Tensor piece = weights ? weights->read_flat(e.name, s.param_offset, s.param_offset + s.numel).to(at::kFloat)
                                 : init_param(specs[e.spec], seed).flatten().narrow(0, s.param_offset, s.numel);
      master.narrow(0, s.shard_offset, s.numel).copy_(piece);  // host to device when on a GPU
      if (lora()) {  // the frozen base's checksum is taken in fp32, before any conversion
        const auto c = piece.contiguous();
        int64_t* row = &base_crc_rows_[e.spec * 3];
        row[0] = s.param_offset;
        row[1] = s.numel;
        row[2] = static_cast<int64_t>(crc32_bytes(c.data_ptr(), c.nbytes()));
      }
    }
    units_.emplace_back(unit_specs[u], std::move(layout), master, /*frozen=*/lora());
    if (lora()) {  // the unit's adapters: a second, small flat unit, sharded like the base
      FlatLayout al = flat_layout(trainable_specs_, u, S);
      auto am = at::zeros({al.shard_numel}, fp32);
      for (const Segment& s : shard_segments(al, sr)) {
        const auto& e = al.entries[s.entry];
        at::Tensor piece = adapters ? adapters->read_flat(peft_key(e.name), s.param_offset, s.param_offset + s.numel).to(at::kFloat)
                                    : init_lora_param(trainable_specs_[e.spec], seed).flatten().narrow(0, s.param_offset, s.numel);
        am.narrow(0, s.shard_offset, s.numel).copy_(piece);
      }
      adapters_.emplace_back(unit_specs[u], std::move(al), am);
    }
    FlatUnit& unit = trainable(u);
    for (const Segment& s : shard_segments(unit.layout(), sr)) {
      const auto& e = unit.layout().entries[s.entry];
      pieces_.push_back({e.name, e.shape, s.param_offset, s.numel, !e.is_norm, unit.master().narrow(0, s.shard_offset, s.numel),
                         u, s.shard_offset});
    }
    if (cfg_.no_sync_accumulation) no_sync_.push_back(at::zeros({unit.layout().padded}, fp32));
  }
  persistent_bytes_ = memory().persistent();
}

void FsdpEngine::prefetch(int64_t u) {
  if (u < 0 || u >= static_cast<int64_t>(units_.size())) return;
  if (backward_ && lora() && units_[u].kind() == UnitKind::kEmbedding) return;  // frozen: its backward is skipped
  for (FlatUnit* unit : {&units_[u], lora() ? &adapters_[u] : nullptr}) {
    if (!unit || unit->empty()) continue;
    if (!unit->active()) unit->begin_gather(*groups_.shard, cfg_.param_dtype);
    else if (!unit->gathered()) unit->begin_regather(*groups_.shard);
  }
}

void FsdpEngine::ensure(int64_t u) {
  prefetch(u);
  units_[u].wait();  // (a frozen embedding in backward was never gathered: nothing to wait for)
  if (lora()) adapters_[u].wait();
  note_gathered();
}

void FsdpEngine::prefetch_from(int64_t u, int direction) {
  if (!cfg_.prefetch) return;
  for (int k = 1; k < cfg_.max_inflight_gathers; ++k) prefetch(u + direction * k);
  note_gathered();
}

void FsdpEngine::note_gathered() {
  int n = 0;
  for (const auto& unit : units_) n += unit.gathered();
  peak_gathered_ = std::max(peak_gathered_, n);
  note_memory();
}

int64_t FsdpEngine::held_bytes() const {
  int64_t b = persistent_bytes_;  // fixed after construction; this runs at every gather and reduction
  const int64_t elt = c10::elementSize(cfg_.param_dtype);
  for (const auto* units : {&units_, &adapters_})
    for (const auto& u : *units) {
      if (u.gathered()) b += gathered_bytes(u.layout().padded, static_cast<int>(elt));
      if (u.grad().defined()) b += u.grad().nbytes();
    }
  for (const auto& r : pending_) b += r.send.nbytes() + (r.shard.is_same(r.send) ? 0 : r.shard.nbytes());
  return b;
}

void FsdpEngine::note_memory() {
  if (!device_.is_cuda()) phase_peak_ = std::max(phase_peak_, held_bytes());
}

MemoryPeaks FsdpEngine::read_and_reset_peak() {
#ifdef SHARDTRAIN_HAVE_CUDA
  if (device_.is_cuda()) {
    const auto m = cuda::device_memory(device_.index());
    cuda::reset_peak_memory(device_.index());
    return {m.peak_allocated, m.peak_reserved};
  }
#endif
  note_memory();
  const int64_t peak = phase_peak_;
  phase_peak_ = held_bytes();
  return {peak, peak};
}

int64_t FsdpEngine::take_phase_peak() { return peaks_.close_phase().allocated; }

bool FsdpEngine::recomputes(int64_t u) const {
  return cfg_.activation_checkpointing && units_[u].kind() == UnitKind::kDecoderLayer;
}

at::Tensor FsdpEngine::run_unit(int64_t u, const at::Tensor& x, uint64_t dropout_seed, bool train) {
  const auto views = units_[u].named_views();
  const auto lookup = [&views](const std::string& name) { return views.at(name); };
  if (!lora() || adapters_[u].empty()) return unit_forward(model_, units_[u].spec(), lookup, x, rope_, cfg_.param_dtype);
  const auto adapter_views = adapters_[u].named_views();
  const LoraRun run{&cfg_.lora, [&adapter_views](const std::string& name) { return adapter_views.at(name); }, dropout_seed, train};
  return unit_forward(model_, units_[u].spec(), lookup, x, rope_, cfg_.param_dtype, &run);
}

at::Tensor FsdpEngine::forward(Pass& p, const at::Tensor& tokens, bool build_graph) {
  const bool reshard = reshard_after_forward(cfg_.sharding);
  p.inputs.assign(units_.size(), at::Tensor());
  p.outputs.assign(units_.size(), at::Tensor());
  p.empty = tokens.size(0) == 0;
  p.train = build_graph;
  p.dropout_seed = (seed_ * 0x9E3779B97F4A7C15ull) ^ (static_cast<uint64_t>(groups_.world->rank()) << 40) ^ passes_++;
  at::Tensor x = tokens;
  for (int64_t u = 0; u < static_cast<int64_t>(units_.size()); ++u) {
    cuda::NvtxRange range(nvtx_names_[u].first);
    ensure(u);
    prefetch_from(u, +1);
    if (!p.empty) {
      at::AutoGradMode mode(build_graph && !recomputes(u));
      // The graph is cut here: the unit's input is a leaf whose gradient backward hands on (not
      // to a frozen embedding, which needs none).
      const bool input_grad = !(lora() && u == 1);
      if (units_[u].kind() != UnitKind::kEmbedding) x = p.inputs[u] = build_graph ? x.detach().requires_grad_(input_grad) : x;
      const bool fused = p.fused_head && units_[u].kind() == UnitKind::kHead;
      x = p.outputs[u] = fused ? rms_norm(x, units_[u].named_views().at(names::kNorm), model_.rms_norm_eps)
                               : run_unit(u, x, p.dropout_seed, p.train);
    }
    // The head's backward follows at once: like FSDP2's root, it stays gathered until then.
    const bool head = units_[u].kind() == UnitKind::kHead;
    if (!build_graph || (reshard && !head)) {
      units_[u].free_storage();
      if (lora()) adapters_[u].free_storage();
    }
  }
  return x;
}

void FsdpEngine::backward(Pass& p, const at::Tensor& loss, bool reduce_now) {
  at::Tensor grad_out;
  backward_ = true;
  for (int64_t u = static_cast<int64_t>(units_.size()) - 1; u >= 0; --u) {
    cuda::NvtxRange range(nvtx_names_[u].second);
    ensure(u);
    prefetch_from(u, -1);
    const bool frozen_unit = lora() && adapters_[u].empty() && units_[u].kind() == UnitKind::kEmbedding;
    if (!p.empty && !frozen_unit) {  // a LoRA run's embedding has nothing to train and no input gradient
      if (units_[u].kind() == UnitKind::kHead) {
        loss.backward();
      } else {
        at::Tensor out = p.outputs[u];
        if (recomputes(u)) {  // recompute with the regathered weights
          at::AutoGradMode on(true);
          out = run_unit(u, p.inputs[u], p.dropout_seed, p.train);
        }
        torch::autograd::backward({out}, {grad_out});
      }
      if (units_[u].kind() != UnitKind::kEmbedding) grad_out = p.inputs[u].grad();
    }
    FlatUnit& t = trainable(u);  // the base, or under LoRA the unit's adapters
    if (!t.empty()) {
      at::Tensor g = t.leaf_grad();
      if (!g.defined()) g = at::zeros({t.layout().padded}, at::TensorOptions().dtype(cfg_.param_dtype).device(device_));
      if (reduce_now) reduce_unit(u, g, /*owned=*/true);
      else no_sync_[u].add_(g.to(at::kFloat));
    }
    p.outputs[u] = at::Tensor(), p.inputs[u] = at::Tensor();
    units_[u].release();
    if (lora()) adapters_[u].release();
  }
  backward_ = false;
}

void FsdpEngine::reduce_unit(int64_t u, const at::Tensor& full_grad, bool owned) {
  PendingReduce r;
  r.unit = u;
  r.send = full_grad.to(cfg_.reduce_dtype).contiguous();
  if (groups_.shard->size() == 1) {
    r.shard = r.send;
    r.owned = owned || !r.send.is_same(full_grad);  // a converted copy is ours to keep
  } else {
    r.shard = at::empty({trainable(u).layout().shard_numel}, r.send.options());
    r.work = groups_.shard->reduce_scatter_async(r.send, r.shard);
  }
  pending_.push_back(std::move(r));
  note_memory();
  // Waited on only when needed: before the optimizer, or when more than kMaxPendingReductions
  // units' buffers are in flight (the oldest completes first).
  while (pending_.size() > kMaxPendingReductions) {
    while (!advance(pending_.front())) {
    }
    pending_.pop_front();
  }
}

bool FsdpEngine::advance(PendingReduce& r) {
  if (r.work) r.work->wait(), r.work.reset();
  if (r.stage == PendingReduce::kScattering && groups_.replicate->size() > 1) {
    r.work = groups_.replicate->all_reduce_async(r.shard);  // hybrid: then across replicas
    r.stage = PendingReduce::kReplicating;
    return false;
  }
  at::Tensor add = r.shard.to(at::kFloat);
  at::Tensor& grad = trainable(r.unit).grad();
  if (!grad.defined()) grad = add.is_same(r.shard) && !r.owned ? add.clone() : add;
  else grad.add_(add);
  r.stage = PendingReduce::kDone;
  note_memory();
  return true;
}

void FsdpEngine::finish_reductions() {
  // Every hybrid all-reduce starts before any is waited on, in the order issued on every rank.
  for (auto& r : pending_)
    if (r.stage == PendingReduce::kScattering) advance(r);
  for (auto& r : pending_)
    while (r.stage != PendingReduce::kDone) advance(r);
  pending_.clear();
}

void FsdpEngine::reduce_accumulated() {
  for (size_t u = 0; u < units_.size(); ++u)
    if (!trainable(static_cast<int64_t>(u)).empty()) reduce_unit(static_cast<int64_t>(u), no_sync_[u], /*owned=*/false);
  finish_reductions();  // the buffers are read by the reductions until they complete
  for (auto& b : no_sync_) b.zero_();
}

void FsdpEngine::release_grads() {
  for (size_t u = 0; u < units_.size(); ++u) trainable(static_cast<int64_t>(u)).grad() = at::Tensor();
}

double FsdpEngine::comm_wait_seconds() const {
  double w = 0;  // the three groups are distinct communicators
  for (const comm::Communicator* c : groups_.all())
    w += c->log().wait_seconds();
  return w;
}

GradResult FsdpEngine::forward_backward(const std::vector<Batch>& micro_batches) {
  GradResult r;
  PhaseClock clock(*this);
  peaks_.discard();  // the step's phases start from what is held now (not from validation's or a save's)
  auto close_phase = [&](Phase p) {
    clock.close(p);
    auto& peak = r.peak_bytes[static_cast<int>(p)];
    peak = std::max(peak, take_phase_peak());
  };
  int64_t local_tokens = 0;
  for (const auto& mb : micro_batches)
    if (mb.tokens.size(0) > 0) local_tokens += count_loss_tokens(mb.labels);
  r.tokens = static_cast<int64_t>(std::llround(sum_world(static_cast<double>(local_tokens))));
  const double denom = static_cast<double>(std::max<int64_t>(1, r.tokens));
  release_grads();  // allocated at the step's first reduction (FSDP2's set_to_none)
  at::Tensor loss_sum = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device_));  // read once per step
  for (const Batch& mb : micro_batches) {
    Pass p;
    const int64_t chunk = loss_chunk_tokens(mb.tokens.numel(), model_.vocab_size, model_.hidden_size, cfg_.loss_chunk);
    p.fused_head = chunk > 0;
    auto logits = forward(p, to_device(mb.tokens), /*build_graph=*/true);  // under fused_head: the normed hidden
    at::Tensor loss;
    if (!p.empty) {
      const auto labels = to_device(mb.labels);
      const at::Tensor sum =
          p.fused_head ? chunked_lm_loss(logits, units_.back().named_views().at(names::kLmHead), labels, chunk, 1.0 / denom)
                       : causal_lm_loss(logits, labels, /*count=*/false).sum;
      loss_sum += sum.detach();
      loss = sum / denom;
    }
    logits = at::Tensor(), p.outputs.back() = at::Tensor();  // autograd keeps only what backward needs
    close_phase(Phase::kForward);
    backward(p, loss, !cfg_.no_sync_accumulation);
    close_phase(Phase::kBackward);
  }
  if (cfg_.no_sync_accumulation) reduce_accumulated();
  finish_reductions();
  r.loss = sum_world(loss_sum.item<double>()) / denom;
  close_phase(Phase::kBackward);  // the reductions' completion and the loss's all-reduce
  r.phases = clock.finish();
  return r;
}

std::vector<at::Tensor> FsdpEngine::grad_shards() {
  std::vector<at::Tensor> g;
  for (const auto& p : pieces_) {
    const at::Tensor& shard = trainable(p.unit).grad();
    g.push_back(shard.defined() ? shard.narrow(0, p.shard_offset, p.numel) : at::Tensor());
  }
  return g;
}

at::Tensor FsdpEngine::to_device(const at::Tensor& host) const {
  if (!device_.is_cuda()) return host;
  return host.pin_memory().to(device_, /*non_blocking=*/true);  // no host sync per micro-batch
}

at::Tensor FsdpEngine::logits(const at::Tensor& tokens) {
  c10::NoGradGuard no_grad;
  Pass p;
  auto out = forward(p, tokens.to(device_), /*build_graph=*/false);
  for (auto& u : units_) u.release();
  for (auto& u : adapters_) u.release();
  return out.to(at::kCPU);  // evaluation and decoding run their arithmetic on the host
}

std::map<std::string, at::Tensor> FsdpEngine::full_parameters() { return gather_full(units_); }
std::map<std::string, at::Tensor> FsdpEngine::full_adapters() { return gather_full(adapters_); }

std::map<std::string, at::Tensor> FsdpEngine::gather_full(std::vector<FlatUnit>& units) {
  std::map<std::string, at::Tensor> out;
  for (auto& u : units) {
    if (u.empty()) continue;
    auto full = at::empty({u.layout().padded}, u.master().options());
    if (groups_.shard->size() == 1) full.copy_(u.master());
    else groups_.shard->all_gather(u.master().contiguous(), full);
    full = full.to(at::kCPU, at::kFloat);  // exports and conversions are written from host memory, in fp32
    for (const auto& e : u.layout().entries) out[e.name] = full.narrow(0, e.offset, e.numel).view(e.shape).clone();
  }
  return out;
}

MemoryReport FsdpEngine::memory() const {
  std::vector<UnitSize> trainable_units, base_units;
  for (size_t i = 0; i < units_.size(); ++i) {
    trainable_units.push_back(unit_size(trainable(static_cast<int64_t>(i)).layout(), units_[i].kind()));
    base_units.push_back(unit_size(units_[i].layout(), units_[i].kind()));
  }
  const PersistentBytes p = persistent_bytes(trainable_units, lora() ? &base_units : nullptr, cfg_.no_sync_accumulation,
                                             static_cast<int>(c10::elementSize(cfg_.param_dtype)));
  MemoryReport m;
  m.param_bytes = p.param, m.grad_bytes = p.grad, m.optimizer_bytes = p.optimizer, m.no_sync_bytes = p.no_sync;
  m.base_bytes = p.base, m.unsharded_bytes = p.unsharded, m.padding_elements = p.padding_elements;
  return m;
}

Optimizer make_optimizer(FsdpEngine& engine, const OptimizerConfig& cfg) {
  comm::Communicator& shard = *engine.groups().shard;
  Optimizer opt(cfg, [&shard](double sq) { return shard.size() > 1 ? shard.all_reduce_sum(sq) : sq; });
  for (const ShardPiece& p : engine.pieces()) opt.add(p.master, p.decay);  // padding is zero: pieces cover the norm
  return opt;
}

}  // namespace shardtrain::fsdp
