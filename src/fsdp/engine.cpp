#include "shardtrain/fsdp/engine.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <cmath>

#include "shardtrain/cuda/nvtx.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::fsdp {

using comm::Communicator;

// Per micro-batch: the detached input leaf and the output of every unit, [units].
struct FsdpEngine::Pass {
  std::vector<at::Tensor> inputs, outputs;
  bool empty = false;  // this rank has no rows: it still joins every collective
};

FsdpEngine::FsdpEngine(ModelConfig model, FsdpConfig cfg, comm::ProcessGroups& groups, uint64_t seed,
                       const SafetensorsModel* weights, at::Device device)
    : model_(std::move(model)), cfg_(std::move(cfg)), groups_(groups), device_(device),
      rope_(model_, model_.max_position_embeddings) {
  cfg_.validate();
  rope_.to(device_);
  const auto fp32 = at::TensorOptions().dtype(at::kFloat).device(device_);
  const auto specs = llama_param_specs(model_);
  const auto unit_specs = model_units(model_);
  const int S = groups_.shard->size(), sr = groups_.shard->rank();
  for (int64_t u = 0; u < static_cast<int64_t>(unit_specs.size()); ++u) {
    nvtx_names_.emplace_back("fwd unit " + std::to_string(u), "bwd unit " + std::to_string(u));
    FlatLayout layout = flat_layout(specs, u, S);
    auto master = at::zeros({layout.shard_numel}, fp32);
    for (const Segment& s : shard_segments(layout, sr)) {
      const auto& e = layout.entries[s.entry];
      // Only this rank's bytes are read from the file; the seeded init is per parameter.
      at::Tensor piece = weights ? weights->read_flat(e.name, s.param_offset, s.param_offset + s.numel).to(at::kFloat)
                                 : init_param(specs[e.spec], seed).flatten().narrow(0, s.param_offset, s.numel);
      master.narrow(0, s.shard_offset, s.numel).copy_(piece);  // host to device when on a GPU
    }
    units_.emplace_back(unit_specs[u], std::move(layout), master);
    FlatUnit& unit = units_.back();
    for (const Segment& s : shard_segments(unit.layout(), sr)) {
      const auto& e = unit.layout().entries[s.entry];
      pieces_.push_back({e.name, e.shape, s.param_offset, s.numel, !e.is_norm, unit.master().narrow(0, s.shard_offset, s.numel),
                         unit.grad().narrow(0, s.shard_offset, s.numel)});
    }
    if (cfg_.no_sync_accumulation) no_sync_.push_back(at::zeros({unit.layout().padded}, fp32));
  }
}

void FsdpEngine::prefetch(int64_t u) {
  if (u < 0 || u >= static_cast<int64_t>(units_.size())) return;
  FlatUnit& unit = units_[u];
  if (!unit.active()) unit.begin_gather(*groups_.shard, cfg_.param_dtype);
  else if (!unit.gathered()) unit.begin_regather(*groups_.shard);
}

void FsdpEngine::ensure(int64_t u) {
  prefetch(u);
  units_[u].wait();
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
}

bool FsdpEngine::recomputes(int64_t u) const {
  return cfg_.activation_checkpointing && units_[u].kind() == UnitKind::kDecoderLayer;
}

at::Tensor FsdpEngine::run_unit(int64_t u, const at::Tensor& x) {
  const auto views = units_[u].named_views();
  return unit_forward(model_, units_[u].spec(), [&views](const std::string& name) { return views.at(name); }, x, rope_,
                      cfg_.param_dtype);
}

at::Tensor FsdpEngine::forward(Pass& p, const at::Tensor& tokens, bool build_graph) {
  const bool reshard = reshard_after_forward(cfg_.sharding);
  p.inputs.assign(units_.size(), at::Tensor());
  p.outputs.assign(units_.size(), at::Tensor());
  p.empty = tokens.size(0) == 0;
  at::Tensor x = tokens;
  for (int64_t u = 0; u < static_cast<int64_t>(units_.size()); ++u) {
    cuda::NvtxRange range(nvtx_names_[u].first);
    ensure(u);
    prefetch_from(u, +1);
    if (!p.empty) {
      at::AutoGradMode mode(build_graph && !recomputes(u));
      // The graph is cut here: the unit's input is a leaf whose gradient backward hands on.
      if (units_[u].kind() != UnitKind::kEmbedding) x = p.inputs[u] = build_graph ? x.detach().requires_grad_(true) : x;
      x = p.outputs[u] = run_unit(u, x);
    }
    // The head's backward follows at once, so keeping it gathered saves nothing; FSDP's
    // reshard_after_forward still frees it, and we match that volume exactly.
    if (reshard || !build_graph) units_[u].free_storage();
  }
  return x;
}

void FsdpEngine::backward(Pass& p, const at::Tensor& loss, bool reduce_now) {
  at::Tensor grad_out;
  for (int64_t u = static_cast<int64_t>(units_.size()) - 1; u >= 0; --u) {
    cuda::NvtxRange range(nvtx_names_[u].second);
    ensure(u);
    prefetch_from(u, -1);
    if (!p.empty) {
      if (units_[u].kind() == UnitKind::kHead) {
        loss.backward();
      } else {
        at::Tensor out = p.outputs[u];
        if (recomputes(u)) {  // recompute with the regathered weights
          at::AutoGradMode on(true);
          out = run_unit(u, p.inputs[u]);
        }
        torch::autograd::backward({out}, {grad_out});
      }
      if (units_[u].kind() != UnitKind::kEmbedding) grad_out = p.inputs[u].grad();
    }
    at::Tensor g = units_[u].leaf_grad();
    if (!g.defined()) g = at::zeros({units_[u].layout().padded}, at::TensorOptions().dtype(cfg_.param_dtype).device(device_));
    if (reduce_now) reduce_unit(u, g);
    else no_sync_[u].add_(g.to(at::kFloat));
    p.outputs[u] = at::Tensor(), p.inputs[u] = at::Tensor();
    units_[u].release();
  }
}

void FsdpEngine::reduce_unit(int64_t u, const at::Tensor& full_grad) {
  FlatUnit& unit = units_[u];
  auto send = full_grad.to(cfg_.reduce_dtype).contiguous();
  at::Tensor shard;
  if (groups_.shard->size() == 1) {
    shard = send;
  } else {
    shard = at::empty({unit.layout().shard_numel}, send.options());
    groups_.shard->reduce_scatter(send, shard);
  }
  if (groups_.replicate->size() > 1) groups_.replicate->all_reduce(shard);
  unit.grad().add_(shard.to(at::kFloat));
}

void FsdpEngine::reduce_accumulated() {
  for (size_t u = 0; u < units_.size(); ++u) {
    reduce_unit(static_cast<int64_t>(u), no_sync_[u]);
    no_sync_[u].zero_();
  }
}

double FsdpEngine::comm_wait_seconds() const {
  double w = 0;  // the three groups are distinct communicators
  for (const comm::Communicator* c : groups_.all())
    w += c->log().wait_seconds();
  return w;
}

GradResult FsdpEngine::forward_backward(const std::vector<Batch>& micro_batches) {
  GradResult r;
  // Each phase's wall time, less the host time blocked on collectives within it.
  double mark = comm::CollectiveLog::now(), wait_mark = comm_wait_seconds();
  auto close_phase = [&](Phase p) {
    const double now = comm::CollectiveLog::now(), wait = comm_wait_seconds();
    r.phases[p] += (now - mark) - (wait - wait_mark);
    r.phases[Phase::kExposedComm] += wait - wait_mark;
    mark = now, wait_mark = wait;
  };
  int64_t local_tokens = 0;
  for (const auto& mb : micro_batches)
    if (mb.tokens.size(0) > 0) local_tokens += count_loss_tokens(mb.labels);
  r.tokens = static_cast<int64_t>(std::llround(sum_world(static_cast<double>(local_tokens))));
  const double denom = static_cast<double>(std::max<int64_t>(1, r.tokens));
  for (auto& u : units_) u.grad().zero_();
  double loss_sum = 0;
  for (const Batch& mb : micro_batches) {
    Pass p;
    auto logits = forward(p, mb.tokens.to(device_), /*build_graph=*/true);
    at::Tensor loss;
    if (!p.empty) {
      auto ls = causal_lm_loss(logits, mb.labels.to(device_));
      loss_sum += ls.sum.item<double>();
      loss = ls.sum / denom;
    }
    close_phase(Phase::kForward);
    backward(p, loss, !cfg_.no_sync_accumulation);
    close_phase(Phase::kBackward);
  }
  if (cfg_.no_sync_accumulation) reduce_accumulated();
  r.loss = sum_world(loss_sum) / denom;
  close_phase(Phase::kBackward);
  return r;
}

std::vector<at::Tensor> FsdpEngine::grad_shards() const {
  std::vector<at::Tensor> g;
  for (const auto& p : pieces_) g.push_back(p.grad);
  return g;
}

at::Tensor FsdpEngine::logits(const at::Tensor& tokens) {
  c10::NoGradGuard no_grad;
  Pass p;
  auto out = forward(p, tokens.to(device_), /*build_graph=*/false);
  for (auto& u : units_) u.release();
  return out.to(at::kCPU);  // evaluation and decoding run their arithmetic on the host
}

std::map<std::string, at::Tensor> FsdpEngine::full_parameters() {
  std::map<std::string, at::Tensor> out;
  for (auto& u : units_) {
    auto full = at::empty({u.layout().padded}, u.master().options());
    if (groups_.shard->size() == 1) full.copy_(u.master());
    else groups_.shard->all_gather(u.master().contiguous(), full);
    full = full.to(at::kCPU);  // exports and conversions are written from host memory
    for (const auto& e : u.layout().entries) out[e.name] = full.narrow(0, e.offset, e.numel).view(e.shape).clone();
  }
  return out;
}

MemoryReport FsdpEngine::memory() const {
  MemoryReport m;
  int64_t full = 0;
  for (const auto& u : units_) {
    const int64_t n = u.layout().shard_numel;
    m.param_bytes += 4 * n, m.grad_bytes += 4 * n, m.optimizer_bytes += 8 * n;
    m.padding_elements += u.layout().padded - u.layout().numel;
    full += u.layout().numel;
  }
  for (const auto& t : no_sync_) m.no_sync_bytes += t.nbytes();
  m.unsharded_bytes = 16 * full;
  return m;
}

Optimizer make_optimizer(FsdpEngine& engine, const OptimizerConfig& cfg) {
  comm::Communicator& shard = *engine.groups().shard;
  Optimizer opt(cfg, [&shard](double sq) { return shard.size() > 1 ? shard.all_reduce_sum(sq) : sq; });
  for (const ShardPiece& p : engine.pieces()) opt.add(p.master, p.decay);  // padding is zero: pieces cover the norm
  return opt;
}

}  // namespace shardtrain::fsdp
