#include "shardtrain/fsdp/engine.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <cmath>

#include "shardtrain/fsdp/memory_model.h"
#include "shardtrain/fsdp/phase_clock.h"
#include "shardtrain/model/lm_loss.h"
#include "shardtrain/runtime/device_copy.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::fsdp {

using comm::Communicator;

namespace {

FsdpConfig resolved(FsdpConfig cfg, at::Device device) {
  cfg.validate();
  if (cfg.param_dtype == at::ScalarType::Undefined)
    cfg.param_dtype = device.is_cuda() ? at::kBFloat16 : at::kFloat;
  return cfg;
}

// An MPI all-reduce of a host count: no device involved.
int64_t sum_on_host(comm::Communicator& world, int64_t v) {
  world.host_collective(comm::Op::kAllReduce, sizeof v, [&] {
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT64_T, MPI_SUM, world.mpi()));
  });
  return v;
}

// A host tensor summed over the group with MPI, in place (an offloaded gradient norm).
void sum_on_host(comm::Communicator& group, at::Tensor& t) {
  at::Tensor c = t.contiguous();
  group.host_collective(comm::Op::kAllReduce, c.nbytes(), [&] {
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, c.data_ptr<double>(), static_cast<int>(c.numel()),
                            MPI_DOUBLE, MPI_SUM, group.mpi()));
  });
  if (!c.is_same(t)) t.copy_(c);
}

}  // namespace

FsdpEngine::FsdpEngine(model::ModelConfig model, FsdpConfig cfg, comm::ProcessGroups& groups,
                       uint64_t seed, const io::SafetensorsModel* weights, at::Device device,
                       const io::SafetensorsModel* adapters)
    : model_(std::move(model)),
      cfg_(resolved(std::move(cfg), device)),
      groups_(groups),
      device_(device),
      layout_(make_trainable_layout(model_, cfg_.lora)),
      seed_(seed) {
  const int shard_size = groups_.shard->size();
  const TrainingSizes sizes = layout_->sizes(shard_size);
  const MemoryReport report =
      persistent_bytes(sizes, cfg_.no_sync_accumulation,
                       static_cast<int>(c10::elementSize(cfg_.param_dtype)), cfg_.cpu_offload);
  memory_ = std::make_unique<EngineMemory>(
      report, device_, [this] { return schedule_ ? schedule_->transient_bytes() : 0; });
  BuiltUnits built = build_units(*layout_, cfg_, shard_size, groups_.shard->rank(), seed, weights,
                                 adapters, device_);
  pieces_ = std::move(built.pieces);
  base_crc_rows_ = std::move(built.base_crc_rows);
  schedule_ =
      std::make_unique<UnitSchedule>(model_, cfg_, groups_, device_, sizes, std::move(built.units),
                                     std::move(built.adapters), [this] { memory_->note(); });
}

void FsdpEngine::release_grads() { schedule_->release_grads(); }

GradResult FsdpEngine::forward_backward(const std::vector<model::Batch>& micro_batches,
                                        bool read_loss) {
  GradResult r;
  auto clock = std::make_shared<PhaseClock>(groups_, device_.is_cuda());
  memory_->start_step();
  auto close_phase = [&](runtime::Phase p) {
    clock->close(p);
    auto& peak = r.peak_bytes[static_cast<int>(p)];
    peak = std::max(peak, memory_->take_phase_peak());
  };
  // Context parallelism: each rank of a group trains its share of the group's rows.
  const std::vector<model::ContextShard> shares = context_shares(micro_batches);
  const auto batch = [&](size_t i) -> const model::Batch& {
    return shares.empty() ? micro_batches[i] : shares[i].local;
  };
  // Under DPO a context group's ranks hold the same pairs: its first rank counts and reports them.
  const bool reports = !preference() || groups_.context->rank() == 0;
  int64_t local_tokens = 0, local_pairs = 0;
  for (size_t i = 0; i < micro_batches.size(); ++i)
    if (batch(i).tokens.size(0) > 0) {
      local_tokens += model::count_loss_tokens(batch(i).labels, batch(i).aligned_labels);
      if (reports) local_pairs += batch(i).tokens.size(0) / 2;
    }
  r.tokens =
      sum_on_host(*groups_.world, local_tokens);  // counted on the host from the host's labels
  // DPO: the mean over the global batch's pairs, against the reference's log-probabilities,
  // each micro-batch's taken before any training pass (the reference may be this very model).
  std::vector<at::Tensor> reference;
  if (preference())
    for (const model::Batch& mb : micro_batches)
      reference.push_back(reference_(mb));  // an empty batch too: a model's forward is collective
  const int64_t units = preference() ? sum_on_host(*groups_.world, local_pairs) : r.tokens;
  const double denom = static_cast<double>(std::max<int64_t>(1, units));
  at::Tensor stats = at::zeros({model::kNumPreferenceStats},
                               at::TensorOptions().dtype(at::kDouble).device(device_));
  release_grads();  // allocated at the step's first reduction (FSDP2's set_to_none)
  if (HostOffload* offload = schedule_->offload()) offload->start_step();
  at::Tensor loss_sum =
      at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device_));  // read once per step
  for (size_t i = 0; i < micro_batches.size(); ++i) {
    const model::Batch& mb = batch(i);
    Pass p;
    const int64_t chunk = model::loss_chunk_tokens(mb.tokens.numel(), model_.vocab_size,
                                                   model_.hidden_size, cfg_.loss_chunk);
    p.fused_head = chunk > 0;
    if (cfg_.lora.enabled() && cfg_.lora.dropout > 0) p.row_seeds = dropout_row_seeds(mb);
    auto logits = schedule_->forward(p, runtime::to_device(mb.tokens, device_), mb.positions,
                                     /*build_graph=*/true, shares.empty() ? nullptr : &shares[i]);
    at::Tensor loss;  // under fused_head, logits holds the normed hidden
    if (!p.empty) {
      const auto labels = runtime::to_device(mb.labels, device_);
      const bool aligned = mb.aligned_labels;
      at::Tensor sum;
      if (preference()) {
        // The whole rows' log-probabilities and answer lengths (from the host's whole rows): the
        // group's ranks each hold a share of every row's tokens and backpropagate through it.
        const at::Tensor policy = context_row_sum(
            p.fused_head ? model::chunked_row_logps(logits, p.head_weight, labels, chunk, aligned)
                         : model::row_logps(logits, labels, aligned));
        const model::Batch& whole = micro_batches[i];
        const model::PreferenceTerms t = model::preference_loss(
            policy, reference[i], model::row_answer_tokens(whole.labels, whole.aligned_labels),
            preference_);
        sum = t.losses.sum();
        if (reports) stats += t.stats;
      } else {
        sum = p.fused_head ? model::chunked_lm_loss(logits, p.head_weight, labels, chunk,
                                                    1.0 / denom, aligned)
                           : model::causal_lm_loss(logits, labels, /*count=*/false, aligned).sum;
      }
      if (reports) loss_sum += sum.detach();
      loss = sum / denom;
    }
    logits = at::Tensor();  // autograd keeps only what backward needs
    p.outputs.back() = at::Tensor();
    close_phase(runtime::Phase::kForward);
    schedule_->backward(p, loss, !cfg_.no_sync_accumulation, i + 1 == micro_batches.size());
    close_phase(runtime::Phase::kBackward);
  }
  if (cfg_.no_sync_accumulation) schedule_->reduce_accumulated();
  schedule_->finish_reductions();
  groups_.world->all_reduce(
      loss_sum);  // on the device (NCCL: ordered on the stream; the host goes on)
  r.loss_t = loss_sum / denom;
  if (preference()) {
    groups_.world->all_reduce(stats);
    r.preference = stats;
  }
  if (read_loss) r.loss = r.loss_t.item<double>();
  close_phase(runtime::Phase::kBackward);  // the reductions' completion and the loss's all-reduce
  if (read_loss)
    r.phases = clock->finish();  // CUDA: waits for the step's last event
  else
    r.clock = std::move(clock);
  return r;
}

std::vector<uint64_t> FsdpEngine::dropout_row_seeds(const model::Batch& mb) {
  if (!mb.sample_ids.empty()) return model::dropout_row_seeds(seed_, mb.epoch, mb.sample_ids);
  std::vector<int64_t> rows(
      static_cast<size_t>(mb.tokens.size(0)));  // unnamed rows: by place, per pass
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int64_t>(i);
  return model::dropout_row_seeds(seed_ ^ 0x5bd1e995ull, static_cast<int64_t>(unnamed_passes_++),
                                  rows);
}

std::vector<at::Tensor> FsdpEngine::grad_shards() {
  if (HostOffload* offload = schedule_->offload()) offload->wait_grads();
  std::vector<at::Tensor> g;
  for (const auto& p : pieces_) {
    FlatUnit& unit = schedule_->trainable(p.unit);
    const at::Tensor& shard = unit.offloaded() ? unit.host_grad() : unit.grad();
    g.push_back(shard.defined() ? shard.narrow(0, p.shard_offset, p.numel) : at::Tensor());
  }
  return g;
}

std::vector<model::ContextShard> FsdpEngine::context_shares(
    const std::vector<model::Batch>& batches) const {
  std::vector<model::ContextShard> out;
  const int n = groups_.context->size();
  if (n == 1) return out;
  for (const model::Batch& b : batches)
    out.push_back(model::context_shard(b, n, groups_.context->rank()));
  return out;
}

model::LossSum FsdpEngine::eval_loss(const model::Batch& batch) {
  c10::NoGradGuard no_grad;
  const std::vector<model::ContextShard> shares = context_shares({batch});
  const model::Batch& b = shares.empty() ? batch : shares.front().local;
  Pass p;
  const at::Tensor logits =
      schedule_->forward(p, runtime::to_device(b.tokens, device_), b.positions,
                         /*build_graph=*/false, shares.empty() ? nullptr : &shares.front());
  schedule_->release_all();
  model::LossSum r;
  if (p.empty) return r;
  r = model::causal_lm_loss(logits, runtime::to_device(b.labels, device_), /*count=*/false,
                            b.aligned_labels);
  r.count = model::count_loss_tokens(b.labels, b.aligned_labels);  // the host's labels
  return r;
}

at::Tensor FsdpEngine::row_logps(const model::Batch& whole, bool adapters) {
  c10::NoGradGuard no_grad;
  const std::vector<model::ContextShard> shares = context_shares({whole});
  const model::Batch& batch = shares.empty() ? whole : shares.front().local;
  Pass p;
  p.adapters_off = !adapters;
  const int64_t chunk = model::loss_chunk_tokens(batch.tokens.numel(), model_.vocab_size,
                                                 model_.hidden_size, cfg_.loss_chunk);
  p.fused_head = chunk > 0;  // the head's logits a chunk at a time, as in training
  const at::Tensor out =
      schedule_->forward(p, runtime::to_device(batch.tokens, device_), batch.positions,
                         /*build_graph=*/false, shares.empty() ? nullptr : &shares.front());
  at::Tensor logps;
  if (!p.empty) {
    const auto labels = runtime::to_device(batch.labels, device_);
    logps = context_row_sum(p.fused_head ? model::chunked_row_logps(out, p.head_weight, labels,
                                                                    chunk, batch.aligned_labels)
                                         : model::row_logps(out, labels, batch.aligned_labels));
  }
  schedule_->release_all();
  if (p.empty) return at::zeros({0}, at::kDouble);
  return logps.to(at::kCPU, at::kDouble);
}

at::Tensor FsdpEngine::context_row_sum(const at::Tensor& partial) const {
  if (groups_.context->size() == 1) return partial;
  at::Tensor whole = partial.detach().to(at::kDouble, /*non_blocking=*/false, /*copy=*/true);
  groups_.context->all_reduce(whole);
  // The value is the group's sum, alike on every rank; the gradient flows to this rank's share.
  return whole.to(partial.scalar_type()) + (partial - partial.detach());
}

void FsdpEngine::set_preference(const model::PreferenceConfig& cfg, ReferenceFn reference) {
  preference_ = cfg;
  reference_ = std::move(reference);
}

at::Tensor FsdpEngine::eval_preference(const model::Batch& batch, const ReferenceFn& reference) {
  const at::Tensor ref = reference(batch);  // both forwards are collective: empty batches too
  const at::Tensor policy = row_logps(batch);
  // A context group's ranks hold the same pairs: its first rank reports them.
  if (batch.tokens.size(0) == 0 || groups_.context->rank() != 0)
    return at::zeros({model::kNumPreferenceStats}, at::kDouble);
  return model::preference_loss(
             policy, ref, model::row_answer_tokens(batch.labels, batch.aligned_labels), preference_)
      .stats.to(at::kCPU);
}

int FsdpEngine::data_rank() const { return groups_.layout.context_color; }
int FsdpEngine::data_world() const { return groups_.world->size() / groups_.context->size(); }

at::Tensor FsdpEngine::logits(const at::Tensor& tokens, const at::Tensor& positions, bool on_host) {
  c10::NoGradGuard no_grad;
  Pass p;
  auto out = schedule_->forward(p, tokens.to(device_), positions, /*build_graph=*/false);
  schedule_->release_all();
  return on_host ? out.to(at::kCPU) : out;  // decoding runs its arithmetic on the host
}

std::map<std::string, at::Tensor> FsdpEngine::full_parameters() {
  return gather_full(schedule_->units());
}
std::map<std::string, at::Tensor> FsdpEngine::full_adapters() {
  return gather_full(schedule_->adapters());
}

void FsdpEngine::settle() {
  if (HostOffload* offload = schedule_->offload()) offload->settle();
}

std::map<std::string, at::Tensor> FsdpEngine::gather_full(const std::vector<FlatUnit>& units) {
  settle();
  std::map<std::string, at::Tensor> out;
  for (auto& u : units) {
    if (u.empty()) continue;
    const at::Tensor master = u.master().to(device_);  // an offloaded master: from the host
    auto full = at::empty({u.layout().padded}, master.options());
    if (groups_.shard->size() == 1)
      full.copy_(master);
    else
      groups_.shard->all_gather(master.contiguous(), full);
    full = full.to(at::kCPU,
                   at::kFloat);  // exports and conversions are written from host memory, in fp32
    for (const auto& e : u.layout().entries)
      out[e.name] = full.narrow(0, e.offset, e.numel).view(e.shape).clone();
  }
  return out;
}

optim::Optimizer make_optimizer(FsdpEngine& engine, const optim::OptimizerConfig& cfg) {
  comm::Communicator& shard = *engine.groups().shard;
  HostOffload* offload = engine.host_offload();
  optim::Optimizer opt(cfg, [&shard, offload](at::Tensor& sq) {
    if (shard.size() == 1) return;
    if (offload)  // the norm is summed where the gradients are: on the host, over MPI
      sum_on_host(shard, sq);
    else
      shard.all_reduce(sq);  // on the device: NCCL orders it on the stream, no host read
  });
  for (const ShardPiece& p : engine.pieces())
    opt.add(p.master, p.decay);  // padding is zero: pieces cover the norm
  if (offload) {  // one group of slots per unit, stepped on the host thread in model order
    optim::GroupRunner runner;
    std::vector<int64_t> group_unit;
    const auto& pieces = engine.pieces();
    for (size_t i = 0; i < pieces.size(); ++i) {
      if (i + 1 == pieces.size() || pieces[i + 1].unit != pieces[i].unit) {
        runner.group_ends.push_back(i + 1);
        group_unit.push_back(pieces[i].unit);
      }
    }
    runner.run = [offload, group_unit](size_t g, std::function<void()> job) {
      offload->run(group_unit.empty() ? 0 : group_unit[g], std::move(job));
    };
    runner.wait = [offload] { offload->settle(); };
    runner.arm = [offload, group_unit](size_t g, std::function<void()> job) {
      offload->arm(group_unit.empty() ? 0 : group_unit[g], std::move(job));
    };
    opt.set_runner(std::move(runner));
  }
  return opt;
}

}  // namespace shardtrain::fsdp
