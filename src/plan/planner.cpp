#include "shardtrain/plan/planner.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "shardtrain/model/flops.h"
#include "shardtrain/model/token_layout.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/stats.h"

namespace shardtrain::plan {
namespace {

using comm::Op;
using fsdp::Sharding;
using fsdp::UnitSize;

constexpr int64_t kGiB = int64_t{1} << 30;
// Allowances, not measurements (docs/planner.md): NCCL's buffers per communicator that spans
// more than one rank, and the caching allocator's fragmentation over the tensors' peak.
constexpr int64_t kNcclPerCommunicator = kGiB / 2;
constexpr double kAllocatorFraction = 0.10;
constexpr double kAdamBytesPerElement =
    28;  // AdamW reads and writes master, exp_avg, exp_avg_sq; reads the gradient

int elt_of(at::ScalarType t) { return static_cast<int>(c10::elementSize(t)); }

// One unit's forward FLOPs per token (a third of forward + backward).
double unit_forward_flops(const model::ModelConfig& m, const UnitSize& u, int64_t seq_len) {
  if (u.kind == model::UnitKind::kEmbedding) return 0;
  if (u.kind == model::UnitKind::kHead)
    return 2.0 * static_cast<double>(m.vocab_size * m.hidden_size);
  return 2.0 * static_cast<double>(u.numel) +
         4.0 * m.num_heads * m.head_dim() * static_cast<double>(seq_len);
}

struct UnitComm {  // seconds, per micro-batch unless said
  double gather = 0, regather = 0, reduce = 0, replicate = 0;
};

}  // namespace

Calibration read_calibration(const std::string& metrics_file) {
  std::ifstream in(metrics_file);
  if (!in)
    throw runtime::UsageError("--calibrate '" + metrics_file +
                              "' cannot be read; pass a train --metrics-file");
  std::vector<double> tflops, fwd, bwd, opt;
  std::string line;
  int64_t n = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const std::exception&) {
      throw runtime::UsageError("--calibrate " + metrics_file + " line " + std::to_string(n + 1) +
                                " is not JSON");
    }
    ++n;
    if (!j.contains("phases") || !j.contains("tflops_per_device") || j.value("step", 0) <= 1)
      continue;  // step 1 warms up
    const auto& p = j["phases"];
    const double busy =
        p.value("forward", 0.0) + p.value("backward", 0.0);  // exposed_comm is a phase of its own
    const double step = j.value("step_time_s", 0.0), per_device = j.value("tflops_per_device", 0.0);
    if (busy <= 0 || step <= 0 || per_device <= 0) continue;
    // The device's achieved rate: its share of the step's FLOPs over its busy compute time.
    tflops.push_back(per_device * step / busy);
    // Forward and backward apart (a third and two thirds of the FLOPs): on a CPU the backward
    // runs slower per FLOP, and activation checkpointing adds forwards, not backwards.
    if (p.value("forward", 0.0) > 0 && p.value("backward", 0.0) > 0) {
      fwd.push_back(per_device * step / 3 / p.value("forward", 0.0));
      bwd.push_back(per_device * step * 2 / 3 / p.value("backward", 0.0));
    }
    const int64_t elems =
        j.contains("memory") ? j["memory"].value("param_bytes", int64_t{0}) / 4 : 0;
    if (elems > 0) opt.push_back(p.value("optimizer", 0.0) / static_cast<double>(elems));
  }
  if (tflops.empty())
    throw runtime::UsageError("--calibrate " + metrics_file +
                              " has no measured step after the first; train 3 steps or more");
  Calibration c{metrics_file, runtime::median(tflops), opt.empty() ? 0.0 : runtime::median(opt)};
  c.forward_tflops = fwd.empty() ? c.compute_tflops : runtime::median(fwd);
  c.backward_tflops = bwd.empty() ? c.compute_tflops : runtime::median(bwd);
  return c;
}

std::vector<PlanRow> plan_rows(const PlanInput& in) {
  std::vector<PlanRow> rows;
  const model::ModelConfig& m = in.model;
  const auto layout = fsdp::make_trainable_layout(m, in.fsdp.lora);
  const int pe = elt_of(in.fsdp.param_dtype);
  const int re = elt_of(in.fsdp.reduce_dtype);
  const bool cuda = in.gpu.name != "cpu";
  const model::PackedRows packed{in.seq_len,
                                 model::packed_rows_use_varlen(cuda, in.fsdp.param_dtype)};
  const model::ActivationBytes act = layout->activation_bytes(pe, in.packed ? &packed : nullptr);
  const bool calibrated = in.calibration.compute_tflops > 0;
  const double fwd_tflops =
      calibrated ? in.calibration.forward_tflops : in.gpu.peak_tflops * in.default_mfu;
  const double bwd_tflops =
      calibrated ? in.calibration.backward_tflops : in.gpu.peak_tflops * in.default_mfu;
  const int64_t tokens_mb = in.batch_size * in.seq_len;  // per rank per micro-batch
  for (Sharding s : in.strategies) {
    for (int nodes : in.nodes) {
      PlanRow r;
      r.nodes = nodes;
      r.ranks = nodes * in.gpus_per_node;
      r.sharding = s;
      runtime::Topology topo{0, r.ranks, 0, in.gpus_per_node, 0, nodes};
      const comm::GroupLayout g = fsdp::group_layout(s, topo, in.fsdp.shard_group_size);
      r.shard_size = g.shard_size;
      r.replicas = g.replicate_size;
      const fsdp::TrainingSizes sizes = layout->sizes(r.shard_size);
      const std::vector<UnitSize>& base = sizes.base;
      fsdp::FsdpConfig cfg = in.fsdp;
      cfg.sharding = s;
      r.state = fsdp::persistent_bytes(sizes, cfg.no_sync_accumulation, pe);
      const fsdp::StepShape shape{in.batch_size, in.seq_len,           in.grad_accum, pe, re,
                                  r.shard_size,  m.tie_word_embeddings};
      const fsdp::StepPeak peak = fsdp::step_peak(sizes, cfg, shape, act, r.state.persistent());
      r.grads_at_peak = peak.grad_shards;
      r.gathered = peak.gathered;
      r.reductions = peak.reductions;
      r.activations = peak.activations;
      r.gathered_units = peak.gathered_units;
      r.tensor_peak = peak.total_bytes;
      r.engine_peak = peak.engine_bytes;
      if (in.allowances) {
        r.nccl = kNcclPerCommunicator * ((r.shard_size > 1) + (r.replicas > 1));
        r.allocator =
            static_cast<int64_t>(kAllocatorFraction * static_cast<double>(r.tensor_peak)) +
            kGiB;  // + CUDA context
      }
      r.total = r.tensor_peak + r.nccl + r.allocator;
      r.headroom = in.gpu.memory_bytes - static_cast<double>(r.total);
      r.fits = in.gpu.memory_bytes <= 0 || r.headroom >= 0;

      // Step time: the engine's schedule per micro-batch, one collective stream that overlaps
      // the unit computing now with the next unit's gather and the previous unit's reduction.
      const bool shard_spans = r.shard_size > in.gpus_per_node, hybrid = fsdp::is_hybrid(s);
      const bool replicate_spans =
          r.replicas > 1;  // replicas are on other nodes (or NO_SHARD: every rank)
      const bool regather = fsdp::reshard_after_forward(s);
      const int U = static_cast<int>(base.size());
      std::vector<UnitComm> c(U);
      std::vector<double> fwd(U), bwd(U);
      const double backward_ratio = layout->backward_flops_ratio();
      const std::vector<bool> runs_backward = fsdp::runs_backward(sizes);
      for (int u = 0; u < U; ++u) {
        const double f =
            unit_forward_flops(m, base[u], in.seq_len) * static_cast<double>(tokens_mb);
        fwd[u] = f / (fwd_tflops * 1e12);
        // Backward is twice forward's FLOPs (input and weight gradients), once with frozen weights
        // (LoRA), plus the recomputed forward under full activation checkpointing (selective
        // recomputes only element-wise ops, whose FLOPs the model leaves out).
        const bool recompute = base[u].kind == model::UnitKind::kDecoderLayer &&
                               cfg.activation_checkpointing.full(u - 1);
        bwd[u] = backward_ratio * f / (bwd_tflops * 1e12) + (recompute ? fwd[u] : 0.0);
        const double gbytes = static_cast<double>(sizes.gathered_numel(u) * pe);
        const UnitSize& t = sizes.trainable(u);
        c[u].gather = in.fabric.seconds(Op::kAllGather, gbytes, r.shard_size, shard_spans);
        c[u].regather = regather && base[u].kind != model::UnitKind::kHead && runs_backward[u]
                            ? c[u].gather
                            : 0;
        if (sizes.trains(u)) {
          c[u].reduce = in.fabric.seconds(Op::kReduceScatter, static_cast<double>(t.padded * re),
                                          r.shard_size, shard_spans);
          c[u].replicate =
              in.fabric.seconds(Op::kAllReduce, static_cast<double>(t.shard_numel * re), r.replicas,
                                replicate_spans && (hybrid || r.ranks > in.gpus_per_node));
        }
      }
      double compute = 0, total = 0, comm_total = 0;  // total: the overlapped schedule
      const int passes = static_cast<int>(in.grad_accum);
      const bool reduce_now = !cfg.no_sync_accumulation;
      for (int mb = 0; mb < passes; ++mb) {
        total += c[0].gather;  // the first gather is exposed
        for (int u = 0; u < U; ++u) total += std::max(fwd[u], u + 1 < U ? c[u + 1].gather : 0.0);
        total += c[U - 1].regather;
        for (int u = U - 1; u >= 0; --u) {
          const double next =
              (u > 0 ? c[u - 1].regather : 0.0) +
              (reduce_now && u + 1 < U ? c[u + 1].reduce + c[u + 1].replicate : 0.0);
          total += std::max(bwd[u], next);
        }
        if (reduce_now)
          total += c[0].reduce + c[0].replicate;  // the last reduction waits before the optimizer
        for (int u = 0; u < U; ++u) {
          compute += fwd[u] + bwd[u];
          comm_total +=
              c[u].gather + c[u].regather + (reduce_now ? c[u].reduce + c[u].replicate : 0.0);
        }
      }
      if (cfg.no_sync_accumulation)
        for (int u = 0; u < U; ++u) {
          total += c[u].reduce + c[u].replicate;
          comm_total += c[u].reduce + c[u].replicate;
        }
      int64_t shard_elems = 0;
      for (const auto& t : sizes.trainable_units()) shard_elems += t.shard_numel;
      r.optimizer_s =
          in.calibration.optimizer_s_per_element > 0
              ? in.calibration.optimizer_s_per_element * static_cast<double>(shard_elems)
              : (in.gpu.hbm_gbps > 0 ? kAdamBytesPerElement * static_cast<double>(shard_elems) /
                                           (in.gpu.hbm_gbps * 1e9)
                                     : 0);
      if (!in.fabric.overlaps_compute)
        total = compute + comm_total;  // MPI on CPU: collectives progress only when waited on
      r.compute_s = compute;
      r.comm_s = comm_total;
      r.exposed_comm_s = total - compute;
      r.step_s = total + r.optimizer_s;
      const double tokens_per_gpu = static_cast<double>(tokens_mb * in.grad_accum);
      r.tokens_per_s_per_gpu = tokens_per_gpu / r.step_s;
      r.mfu = in.gpu.peak_tflops > 0
                  ? r.tokens_per_s_per_gpu * model::flops_per_token(m, in.seq_len) *
                        (1 + backward_ratio) / 3 / (in.gpu.peak_tflops * 1e12)
                  : 0;
      rows.push_back(r);
    }
    // Efficiency against the fewest nodes of this strategy (per-GPU throughput ratio).
    const size_t first = rows.size() - in.nodes.size();
    for (size_t i = first; i < rows.size(); ++i)
      rows[i].efficiency = rows[i].tokens_per_s_per_gpu / rows[first].tokens_per_s_per_gpu;
  }
  return rows;
}

const PlanRow* best_row(const std::vector<PlanRow>& rows) {
  double top = 0;
  for (const auto& r : rows)
    if (r.fits) top = std::max(top, r.tokens_per_s_per_gpu);
  // Within 1% of the fastest per GPU, the fewest nodes win: the same speed for less to book.
  const PlanRow* best = nullptr;
  for (const auto& r : rows)
    if (r.fits && r.tokens_per_s_per_gpu >= 0.99 * top &&
        (!best || r.nodes < best->nodes ||
         (r.nodes == best->nodes && r.tokens_per_s_per_gpu > best->tokens_per_s_per_gpu)))
      best = &r;
  return best;
}

}  // namespace shardtrain::plan
