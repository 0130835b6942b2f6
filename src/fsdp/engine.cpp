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

EngineSpec resolved(EngineSpec spec) {
  spec.sharding.validate();
  spec.plan.validate();
  if (spec.sharding.param_dtype == at::ScalarType::Undefined)
    spec.sharding.param_dtype = spec.device.is_cuda() ? at::kBFloat16 : at::kFloat;
  return spec;
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

FsdpEngine::FsdpEngine(EngineSpec spec, comm::ParallelDims& dims, uint64_t seed,
                       const io::SafetensorsModel* weights, const io::SafetensorsModel* adapters)
    : spec_(resolved(std::move(spec))),
      model_(spec_.model),
      cfg_(spec_.sharding),
      device_(spec_.device),
      groups_(dims),
      layout_(std::make_unique<TrainableLayout>(model_, spec_.plan.trained(model_))),
      seed_(seed) {
  const int shard_size = groups_.shard->size();
  const TrainingSizes sizes = layout_->sizes(shard_size, groups_.expert_size());
  const MemoryReport report =
      persistent_bytes(sizes, cfg_.no_sync_accumulation,
                       static_cast<int>(c10::elementSize(cfg_.param_dtype)), cfg_.cpu_offload);
  memory_ = std::make_unique<EngineMemory>(
      report, device_, [this] { return schedule_ ? schedule_->transient_bytes() : 0; });
  const comm::GroupLayout& g = groups_.layout;
  const ExpertPlacement experts{g.expert_size, g.expert_rank, g.expert_shard_size,
                                g.expert_shard_rank};
  BuiltUnits built = build_units(*layout_, cfg_, spec_.plan.merged_projections(), shard_size,
                                 groups_.shard->rank(), seed, weights, adapters, device_, experts);
  layout_->hold(std::move(built.pieces), std::move(built.base_crc_rows));
  schedule_ = std::make_unique<UnitSchedule>(
      model_, cfg_, spec_.plan, groups_, device_, sizes, std::move(built.units),
      std::move(built.adapters), [this] { memory_->note(); }, std::move(built.experts));
}

void FsdpEngine::release_grads() { schedule_->release_grads(); }

GradResult FsdpEngine::forward_backward(const std::vector<model::MicroBatch>& micro_batches,
                                        Objective& objective, bool read_loss) {
  GradResult r;
  auto clock = std::make_shared<PhaseClock>(groups_, device_.is_cuda());
  memory_->start_step();
  auto close_phase = [&](runtime::Phase p) {
    clock->close(p);
    auto& peak = r.peak_bytes[static_cast<int>(p)];
    peak = std::max(peak, memory_->take_phase_peak());
  };
  int64_t local_tokens = 0, local_units = 0;
  for (const model::MicroBatch& mb : micro_batches)
    if (mb.local().tokens.size(0) > 0) {
      local_tokens += model::count_loss_tokens(mb.local().labels, mb.local().aligned_labels);
      if (!objective.per_token()) local_units += objective.units(mb);
    }
  r.tokens =
      sum_on_host(*groups_.world, local_tokens);  // counted on the host from the host's labels
  objective.before_forward(micro_batches);        // before any training pass changes the model
  const int64_t units = objective.per_token() ? r.tokens : sum_on_host(*groups_.world, local_units);
  const double denom = static_cast<double>(std::max<int64_t>(1, units));
  at::Tensor stats;
  if (objective.num_stats() > 0)
    stats =
        at::zeros({objective.num_stats()}, at::TensorOptions().dtype(at::kDouble).device(device_));
  release_grads();  // allocated at the step's first reduction (FSDP2's set_to_none)
  if (HostOffload* offload = schedule_->offload()) offload->start_step();
  const auto fp64 = at::TensorOptions().dtype(at::kDouble).device(device_);
  at::Tensor loss_sum = at::zeros({}, fp64);  // read once per step
  // The load-balancing loss: each micro-batch's over every rank's tokens, averaged over them.
  const bool aux = model_.output_router_logits && model_.is_moe();
  const double aux_weight =
      model_.router_aux_loss_coef / static_cast<double>(std::max<size_t>(1, micro_batches.size()));
  at::Tensor aux_sum = at::zeros({}, fp64);
  for (size_t i = 0; i < micro_batches.size(); ++i) {
    const model::Batch& mb = micro_batches[i].local();
    Pass p;
    const int64_t chunk = spec_.plan.head_chunk(model_, mb.tokens.numel());
    p.fused_head = chunk > 0;
    if (spec_.plan.draws_row_seeds()) p.unit.row_seeds = dropout_row_seeds(mb);
    if (aux) {
      p.unit.router_aux = std::make_shared<model::RouterAux>();
      p.unit.router_aux->record = true;
      p.unit.router_aux->stats = at::zeros({2 * model_.num_experts + 1}, fp64);
    }
    at::Tensor loss;
    {
      HeadOutput head;  // under fused_head, out holds the normed hidden
      head.out = schedule_->forward(p, runtime::to_device(mb.tokens, device_), mb.positions,
                                    /*build_graph=*/true, micro_batches[i].share.get());
      if (!p.empty) {
        head.head_weight = p.head_weight;
        head.chunk = p.fused_head ? chunk : 0;
        head.labels = runtime::to_device(mb.labels, device_);
        head.aligned = mb.aligned_labels;
        const LossTerms t = objective.loss(head, micro_batches[i], i, 1.0 / denom);
        if (t.reported.defined()) loss_sum += t.reported;
        if (t.stats.defined()) stats += t.stats;
        loss = t.sum / denom;
      }
    }           // autograd keeps only what backward needs
    if (aux) {  // the whole micro-batch's sums, then the routers' gradient for backward
      model::RouterAux& a = *p.unit.router_aux;
      a.record = false;  // a recomputed forward adds nothing
      groups_.world->all_reduce(a.stats);
      aux_sum += a.finish(model_.num_experts, aux_weight);
    }
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
  if (aux) {
    r.aux_t = aux_sum / static_cast<double>(micro_batches.size());
    r.loss_t = r.loss_t + r.aux_t * model_.router_aux_loss_coef;
  }
  if (stats.defined()) {
    groups_.world->all_reduce(stats);
    r.stats = stats;
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
  for (const auto& p : layout_->pieces()) {
    FlatUnit& unit = schedule_->trainable(p.unit);
    const at::Tensor& shard = unit.offloaded() ? unit.host_grad() : unit.grad();
    g.push_back(shard.defined() ? shard.narrow(0, p.shard_offset, p.numel) : at::Tensor());
  }
  return g;
}

at::Tensor FsdpEngine::evaluate(const model::MicroBatch& mb, Objective& objective) {
  c10::NoGradGuard no_grad;
  objective.before_forward({mb});  // a reference model's forward is collective: empty batches too
  const model::Batch& b = mb.local();
  Pass p;
  p.unit.adapters_off = objective.base_only();
  const int64_t chunk =
      objective.fused_head_in_eval() ? spec_.plan.head_chunk(model_, b.tokens.numel()) : 0;
  p.fused_head = chunk > 0;  // the head's logits a chunk at a time, as in training
  HeadOutput head;
  head.out = schedule_->forward(p, runtime::to_device(b.tokens, device_), b.positions,
                                /*build_graph=*/false, mb.share.get());
  if (p.empty) {
    head.out = at::Tensor();
  } else {
    head.head_weight = p.head_weight;
    head.chunk = chunk;
    head.labels = runtime::to_device(b.labels, device_);
    head.aligned = b.aligned_labels;
  }
  at::Tensor out = objective.evaluate(head, mb);
  schedule_->release_all();
  return out;
}

at::Tensor FsdpEngine::logits(const at::Tensor& tokens, const at::Tensor& positions, bool on_host) {
  c10::NoGradGuard no_grad;
  Pass p;
  auto out = schedule_->forward(p, tokens.to(device_), positions, /*build_graph=*/false);
  schedule_->release_all();
  return on_host ? out.to(at::kCPU) : out;  // decoding runs its arithmetic on the host
}

model::Decoder FsdpEngine::decoder() {
  const auto base = full_parameters();
  const auto adapters = layout_->base_frozen() ? full_parameters(/*adapters=*/true)
                                               : std::map<std::string, at::Tensor>{};
  return model::Decoder(model_, base, adapters, spec_.plan.adapters, device_, cfg_.param_dtype);
}

std::map<std::string, at::Tensor> FsdpEngine::full_parameters(bool adapters) {
  auto out = gather_full(adapters ? schedule_->adapters() : schedule_->units());
  if (!adapters && groups_.expert) gather_experts(out);
  return out;
}

void FsdpEngine::gather_experts(std::map<std::string, at::Tensor>& out) {
  comm::Communicator& group = *groups_.expert;
  const model::ExpertGroup share{group.size(), group.rank(), {}};
  const int64_t local = share.local(model_);
  for (const FlatUnit& u : schedule_->experts()) {
    if (u.empty()) continue;
    // This rank's experts whole (over the expert shard group), then every rank's: their layouts
    // are alike, each its own experts' names.
    const at::Tensor master = u.master().to(device_);
    auto mine = at::empty({u.layout().padded}, master.options());
    if (groups_.expert_shard->size() == 1)
      mine.copy_(master);
    else
      groups_.expert_shard->all_gather(master.contiguous(), mine);
    auto all = at::empty({group.size() * u.layout().padded}, mine.options());
    group.all_gather(mine, all);
    all = all.to(at::kCPU, at::kFloat);
    for (int r = 0; r < group.size(); ++r) {
      const UnitPart part{UnitPart::kExperts, r * local, local};
      const FlatLayout l =
          flat_layout(layout_->base_specs(), u.spec().layer + 1, u.layout().shard_size, part);
      for (const auto& e : l.entries)
        out[e.name] = all.narrow(0, r * l.padded + e.offset, e.numel).view(e.shape).clone();
    }
  }
}

std::map<std::string, at::Tensor> FsdpEngine::gather_full(const std::vector<FlatUnit>& units) {
  if (HostOffload* offload = schedule_->offload()) offload->settle();  // the masters' host steps
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
  comm::Communicator& shard = *engine.groups_.shard;
  HostOffload* offload = engine.schedule_->offload();
  optim::Optimizer opt(cfg, [&shard, offload](at::Tensor& sq) {
    if (shard.size() == 1) return;
    if (offload)  // the norm is summed where the gradients are: on the host, over MPI
      sum_on_host(shard, sq);
    else
      shard.all_reduce(sq);  // on the device: NCCL orders it on the stream, no host read
  });
  const auto& pieces = engine.layout().pieces();
  for (const ShardPiece& p : pieces)
    opt.add(p.master, p.decay);  // padding is zero: pieces cover the norm
  if (offload) {  // one group of slots per unit, stepped on the host thread in model order
    optim::GroupRunner runner;
    std::vector<int64_t> group_unit;
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
