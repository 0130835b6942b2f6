#include "shardtrain/fsdp/engine.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <cmath>

#include "shardtrain/cuda/nvtx.h"
#include "shardtrain/data/loader.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::fsdp {

using comm::Communicator;

// Per micro-batch: the detached input leaf and the output of every unit, [units].
struct FsdpEngine::Pass {
  std::vector<at::Tensor> inputs, outputs;
  bool empty = false;  // this rank has no rows: it still joins every collective
};

FsdpEngine::FsdpEngine(ModelConfig model, FsdpConfig cfg, comm::ProcessGroups& groups, uint64_t seed,
                       const SafetensorsModel* weights)
    : model_(std::move(model)), cfg_(cfg), groups_(groups), rope_(model_, model_.max_position_embeddings),
      opt_(cfg.adamw) {
  if (cfg_.max_inflight_gathers < 1) throw UsageError("--max-inflight-gathers must be 1 or more");
  rope_.cos = rope_.cos.to(cfg_.device), rope_.sin = rope_.sin.to(cfg_.device);
  const auto fp32 = at::TensorOptions().dtype(at::kFloat).device(cfg_.device);
  const auto specs = llama_param_specs(model_);
  const int S = groups_.shard->size(), sr = groups_.shard->rank();
  for (int64_t u = 0; u < model_.num_layers + 2; ++u) {
    nvtx_names_.emplace_back("fwd unit " + std::to_string(u), "bwd unit " + std::to_string(u));
    FlatLayout layout = flat_layout(specs, u, S);
    auto master = at::zeros({layout.shard_numel}, fp32);
    for (const Segment& s : shard_segments(layout, sr)) {
      const auto& e = layout.entries[s.entry];
      // Only this rank's bytes are read from the file; the seeded init is per parameter.
      at::Tensor piece = weights ? weights->read_flat(e.name, s.param_offset, s.param_offset + s.numel).to(at::kFloat)
                                 : init_param(specs[e.spec], seed).flatten().narrow(0, s.param_offset, s.numel);
      master.narrow(0, s.shard_offset, s.numel).copy_(piece);  // host to device when on a GPU
      opt_.add(master.narrow(0, s.shard_offset, s.numel), !e.is_norm);
    }
    units_.emplace_back(std::move(layout), master);
    // The matching views of the persistent gradient shard, in opt_.add's order.
    for (const Segment& s : shard_segments(units_.back().layout(), sr))
      grad_views_.push_back(units_.back().grad().narrow(0, s.shard_offset, s.numel));
    unit_grads_.push_back(units_.back().grad());
    if (!cfg_.sync_each_microstep) no_sync_.push_back(at::zeros({units_.back().layout().padded}, fp32));
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

LayerWeights FsdpEngine::layer_weights(int64_t u) const {
  const auto v = units_[u].views();  // llama_param_specs order, which is LayerWeights' field order
  return {v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8]};
}

at::Tensor FsdpEngine::forward(Pass& p, const at::Tensor& tokens, bool build_graph) {
  const int64_t L = model_.num_layers, head = L + 1;
  const bool reshard = comm::reshard_after_forward(cfg_.sharding);
  p.inputs.assign(units_.size(), at::Tensor());
  p.outputs.assign(units_.size(), at::Tensor());
  p.empty = tokens.size(0) == 0;
  at::Tensor x;
  for (int64_t u = 0; u <= head; ++u) {
    cuda::NvtxRange range(nvtx_names_[u].first);
    ensure(u);
    prefetch_from(u, +1);
    at::Tensor out;
    if (!p.empty) {
      const bool grad_here = build_graph && !(cfg_.activation_checkpointing && u >= 1 && u <= L);
      at::AutoGradMode mode(grad_here);
      if (u > 0) p.inputs[u] = build_graph ? x.detach().requires_grad_(true) : x;
      if (u == 0) {
        out = at::embedding(units_[0].views()[0], tokens).to(cfg_.param_dtype);
      } else if (u <= L) {
        out = decoder_layer(model_, layer_weights(u), p.inputs[u], rope_.cos, rope_.sin);
      } else {
        const auto v = units_[head].views();  // model.norm.weight, lm_head.weight
        out = at::linear(rms_norm(p.inputs[u], v[0], model_.rms_norm_eps), v[1]);
      }
      p.outputs[u] = out;
      x = out;
    }
    // The head's backward follows at once, so keeping it gathered saves nothing; FSDP's
    // reshard_after_forward still frees it, and we match that volume exactly.
    if (reshard || !build_graph) units_[u].free_storage();
  }
  return x;
}

void FsdpEngine::backward(Pass& p, const at::Tensor& loss, bool reduce_now) {
  const int64_t L = model_.num_layers;
  at::Tensor grad_out;
  for (int64_t u = L + 1; u >= 0; --u) {
    cuda::NvtxRange range(nvtx_names_[u].second);
    ensure(u);
    prefetch_from(u, -1);
    if (!p.empty) {
      if (u == L + 1) {
        loss.backward();
      } else {
        at::Tensor out = p.outputs[u];
        if (cfg_.activation_checkpointing && u >= 1 && u <= L) {  // recompute with the regathered weights
          at::AutoGradMode on(true);
          out = decoder_layer(model_, layer_weights(u), p.inputs[u], rope_.cos, rope_.sin);
        }
        torch::autograd::backward({out}, {grad_out});
      }
      if (u > 0) grad_out = p.inputs[u].grad();
    }
    at::Tensor g = units_[u].leaf_grad();
    if (!g.defined()) g = at::zeros({units_[u].layout().padded}, at::TensorOptions().dtype(cfg_.param_dtype).device(cfg_.device));
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

StepResult FsdpEngine::step(const std::vector<Batch>& micro_batches, double lr) {
  StepResult r;
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
  r.tokens = static_cast<int64_t>(std::llround(groups_.world->all_reduce_sum(static_cast<double>(local_tokens))));
  const double denom = static_cast<double>(std::max<int64_t>(1, r.tokens));
  for (auto& u : units_) u.grad().zero_();
  double loss_sum = 0;
  for (size_t m = 0; m < micro_batches.size(); ++m) {
    const Batch& mb = micro_batches[m];
    Pass p;
    auto logits = forward(p, mb.tokens.to(cfg_.device), /*build_graph=*/true);
    at::Tensor loss;
    if (!p.empty) {
      auto ls = causal_lm_loss(logits, mb.labels.to(cfg_.device));
      loss_sum += ls.sum.item<double>();
      loss = ls.sum / denom;
    }
    close_phase(Phase::kForward);
    backward(p, loss, cfg_.sync_each_microstep);
    close_phase(Phase::kBackward);
  }
  if (!cfg_.sync_each_microstep) reduce_accumulated();
  r.loss = groups_.world->all_reduce_sum(loss_sum) / denom;
  // Shards of one replica tile the model; replicas hold equal shards, so sum over the shard group.
  double sq = grad_sq_norm(unit_grads_);  // padding is zero, so whole shards are exact
  if (groups_.shard->size() > 1) sq = groups_.shard->all_reduce_sum(sq);
  r.grad_norm = std::sqrt(sq);
  scale_grads(grad_views_, r.grad_norm, cfg_.grad_clip);
  opt_.step(lr, grad_views_);
  close_phase(Phase::kOptimizer);
  return r;
}

at::Tensor FsdpEngine::logits(const at::Tensor& tokens) {
  c10::NoGradGuard no_grad;
  Pass p;
  auto out = forward(p, tokens.to(cfg_.device), /*build_graph=*/false);
  for (auto& u : units_) u.release();
  return out.to(at::kCPU);  // evaluation and decoding run their arithmetic on the host
}

EvalResult FsdpEngine::evaluate(const TokenFile& data, int64_t batch_size, int64_t max_batches) {
  return evaluate_loss(data, batch_size, max_batches, groups_.world->rank(), groups_.world->size(),
                       [this](const at::Tensor& t) { return logits(t); },
                       [this](double v) { return groups_.world->all_reduce_sum(v); });
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

std::vector<StatePiece> FsdpEngine::state_pieces() {
  std::vector<StatePiece> out;
  size_t slot = 0;  // opt_.add ran in this same order: units, then their segments
  for (auto& u : units_)
    for (const Segment& s : shard_segments(u.layout(), groups_.shard->rank())) {
      const auto& e = u.layout().entries[s.entry];
      auto& st = opt_.slots()[slot++];
      out.push_back({e.name, e.shape, s.param_offset, s.numel, st.param, st.exp_avg, st.exp_avg_sq});
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

}  // namespace shardtrain::fsdp
