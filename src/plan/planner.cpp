#include "shardtrain/plan/planner.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <utility>

#include "shardtrain/model/activation_memory.h"
#include "shardtrain/model/flops.h"
#include "shardtrain/model/projections.h"
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
// --cpu-offload: LibTorch's fused CPU AdamW plus the refresh of the compute-dtype mirror, seconds
// per element on one core, measured by scripts/cpu_adamw_rate.py (docs/planner.md); a rank's
// step divides it by the rank's cores (an assumption), bounded by the host's DRAM bandwidth.
constexpr double kCpuAdamSecondsPerElementCore = 2.89e-9;

int elt_of(at::ScalarType t) { return static_cast<int>(c10::elementSize(t)); }

// One unit's forward FLOPs per token (a third of forward + backward).
double unit_forward_flops(const model::ModelConfig& m, const UnitSize& u, int64_t layer,
                          int64_t seq_len) {
  if (u.kind == model::UnitKind::kEmbedding) return 0;
  if (u.kind == model::UnitKind::kHead)
    return 2.0 * static_cast<double>(m.vocab_size * m.hidden_size);
  // A sparse layer's token passes through experts_per_token of its experts.
  const double idle = m.moe_layer(layer)
                          ? static_cast<double>(m.num_experts - m.experts_per_token) * 3.0 *
                                static_cast<double>(m.hidden_size) *
                                static_cast<double>(m.expert_intermediate_size)
                          : 0.0;
  return 2.0 * (static_cast<double>(u.numel) - idle) +
         4.0 * m.num_heads * m.head_dim() * static_cast<double>(seq_len);
}

// --fp8 (model/fp8.h): per micro-batch of one decoder layer, the projections' GEMM FLOPs (the
// forward's; backward's follow by the layer's ratio) and the bytes the cast kernels move in
// forward and in backward. Each activation or gradient element is read twice (amax, cast) and
// written once per float8 copy: tensorwise one pass writes it and its transpose; rowwise a
// row-scaled and a column-scaled pass. A weight is cast once in forward and, transposed, in
// backward. Without weight gradients (a frozen base) no transposed copy of an input or of
// the output gradient is made. Merged (--fused-layers): q/k/v's input and gate/up's are cast once.
struct Fp8Costs {
  double gemm_flops = 0, forward_bytes = 0, backward_bytes = 0;
};

Fp8Costs fp8_costs(const model::ModelConfig& m, model::Fp8Mode mode, int64_t tokens, int e,
                   bool weight_grads, bool merged) {
  double weights = 0, in = 0, out = 0;
  for (model::Proj p : model::layer_projections(m)) {
    const model::ProjShape s = model::proj_shape(m, p);
    weights += static_cast<double>(s.out * s.in);
    in += static_cast<double>(s.in);
    out += static_cast<double>(s.out);
  }
  if (merged)  // k, v (q's input) and up (gate's)
    in -= static_cast<double>(3 * m.hidden_size);
  const bool rowwise = mode == model::Fp8Mode::kRowwise;
  const double element = weight_grads ? (rowwise ? 4.0 * e + 2 : 2.0 * e + 2) : 2.0 * e + 1;
  const double weight = 2.0 * e + 1;
  const double t = static_cast<double>(tokens);
  return {2.0 * weights * t, t * in * element + weights * weight,
          t * out * element + weights * weight};
}

// The compute rates, TFLOP/s per device: calibrated, or the default MFU of the GPU's peak.
std::pair<double, double> rates(const PlanInput& in) {
  if (in.calibration.compute_tflops > 0)
    return {in.calibration.forward_tflops, in.calibration.backward_tflops};
  return {in.gpu.peak_tflops * in.default_mfu, in.gpu.peak_tflops * in.default_mfu};
}

struct UnitComm {  // seconds, per micro-batch unless said
  double gather = 0, regather = 0, reduce = 0, replicate = 0;
  // --cpu-offload: the shard from the host before each gather (regather: in backward too) and
  // the gradient shard to the host after each reduction.
  double h2d = 0, h2d_again = 0, d2h = 0;
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
  const fsdp::TrainableLayout layout(m, in.run.trained(m));
  const int pe = elt_of(in.fsdp.param_dtype);
  const int re = elt_of(in.fsdp.reduce_dtype);
  const bool cuda = in.gpu.name != "cpu";
  // Soft-capped attention keeps the [T, T] document mask: no variable-length kernel covers it.
  const model::PackedRows packed{
      in.seq_len, model::packed_rows_use_varlen(cuda, in.fsdp.param_dtype) && m.attn_softcap <= 0};
  model::ActivationBytes act = layout.trained().activation_bytes(pe, in.packed ? &packed : nullptr);
  if (in.run.fp8 != model::Fp8Mode::kOff)
    act = model::with_fp8(act, m, pe, in.run.fused_layers, &in.run.adapters);
  const auto [fwd_tflops, bwd_tflops] = rates(in);
  // Context parallelism: a rank holds its share of each row; every activation is per token.
  const int cp = in.context_parallel;
  const int64_t rank_seq = model::context_tokens_per_rank(in.seq_len, cp);
  act = model::with_context_parallel(act, m, pe, cp);
  act = model::with_eager_attention(act, m, pe, rank_seq);     // Gemma 2's soft-capped scores
  act = with_objective(act, in.objective, in.run.loss_chunk);  // DPO's head
  const ReferenceModel reference = reference_model(in.objective, in.run.adapters.enabled());
  const RingCost ring = ring_cost(in);
  const int64_t rows_mb = micro_batch_rows(in.objective, in.batch_size);  // DPO: two per pair
  const int64_t tokens_mb = rows_mb * rank_seq;  // per rank per micro-batch
  const HostSpec host = host_spec(in.gpu);
  for (Sharding s : in.strategies) {
    for (int nodes : in.nodes) {
      PlanRow r;
      r.nodes = nodes;
      r.ranks = nodes * in.gpus_per_node;
      r.sharding = s;
      r.context_parallel = cp;
      runtime::Topology topo{0, r.ranks, 0, in.gpus_per_node, 0, nodes};
      const comm::GroupLayout g = comm::with_experts(
          fsdp::group_layout(s, topo, in.fsdp.shard_group_size), in.fsdp.expert_parallel);
      r.shard_size = g.shard_size;
      r.replicas = g.replicate_size;
      r.expert_parallel = g.expert_size;
      const fsdp::TrainingSizes sizes = layout.sizes(r.shard_size, r.expert_parallel);
      // FLOPs count a layer's whole parameters (a token's experts wherever they live).
      const std::vector<UnitSize> whole = layout.sizes(r.shard_size).base;
      const std::vector<UnitSize>& base = sizes.base;
      fsdp::ShardingConfig cfg = in.fsdp;
      cfg.sharding = s;
      r.state = fsdp::persistent_bytes(sizes, cfg.no_sync_accumulation, pe, cfg.cpu_offload);
      const fsdp::StepShape shape{
          rows_mb, rank_seq,     in.grad_accum,         pe,
          re,      r.shard_size, m.tie_word_embeddings, in.run.head_chunk(m, rows_mb * rank_seq)};
      fsdp::StepPeak peak = fsdp::step_peak(sizes, cfg, shape, act, r.state.persistent());
      const ReferenceMemory ref = add_reference(reference, sizes, cfg, shape, act, peak);
      r.reference = ref.device;
      r.reference_host = ref.host;
      r.reference_peak = ref.forward_peak;
      r.grads_at_peak = peak.grad_shards;
      r.gathered = peak.gathered;
      r.reductions = peak.reductions;
      r.activations = peak.activations;
      r.gathered_units = peak.gathered_units;
      r.tensor_peak = peak.total_bytes;
      r.engine_peak = peak.engine_bytes;
      r.staging = peak.staging;
      if (in.allowances) {
        r.nccl = kNcclPerCommunicator * ((r.shard_size > 1) + (r.replicas > 1));
        r.allocator =
            static_cast<int64_t>(kAllocatorFraction * static_cast<double>(r.tensor_peak)) +
            kGiB;  // + CUDA context
      }
      r.total = r.tensor_peak + r.nccl + r.allocator;
      r.headroom = in.gpu.memory_bytes - static_cast<double>(r.total);
      r.fits = in.gpu.memory_bytes <= 0 || r.headroom >= 0;
      if (cfg.cpu_offload) {
        r.host_bytes_per_node = (r.state.host_bytes + r.reference_host) * in.gpus_per_node;
        r.host_memory_bytes = in.host_memory_bytes > 0 ? in.host_memory_bytes : host.memory_bytes;
        r.host_fits = r.host_memory_bytes <= 0 ||
                      static_cast<double>(r.host_bytes_per_node) <= r.host_memory_bytes;
        r.fits = r.fits && r.host_fits;
      }

      // Step time: the engine's schedule per micro-batch, one collective stream that overlaps
      // the unit computing now with the next unit's gather and the previous unit's reduction.
      const bool shard_spans = r.shard_size > in.gpus_per_node, hybrid = fsdp::is_hybrid(s);
      const bool replicate_spans =
          r.replicas > 1;  // replicas are on other nodes (or NO_SHARD: every rank)
      const bool regather = fsdp::reshard_after_forward(s);
      const int U = static_cast<int>(base.size());
      std::vector<UnitComm> c(U);
      // ring: its exposed seconds; and a sparse layer's all-to-alls, which the layer waits for.
      std::vector<double> fwd(U), bwd(U), ring_f(U), ring_b(U), a2a_f(U), a2a_b(U);
      const AllToAllCost a2a = all_to_all_cost(in, tokens_mb);
      const double backward_ratio = layout.trained().backward_flops_ratio();
      const std::vector<bool> runs_backward = fsdp::runs_backward(sizes);
      for (int u = 0; u < U; ++u) {
        const double f =
            unit_forward_flops(m, whole[u], u - 1, in.seq_len) * static_cast<double>(tokens_mb);
        fwd[u] = f / (fwd_tflops * 1e12);
        // Backward is twice forward's FLOPs (input and weight gradients), once with frozen weights
        // (adapters), plus the recomputed forward under full activation checkpointing (selective
        // recomputes only element-wise ops, whose FLOPs the model leaves out).
        const bool recompute = base[u].kind == model::UnitKind::kDecoderLayer &&
                               cfg.activation_checkpointing.full(u - 1);
        bwd[u] = backward_ratio * f / (bwd_tflops * 1e12) + (recompute ? fwd[u] : 0.0);
        if (base[u].kind == model::UnitKind::kHead &&
            head_recomputes_logits(in.objective, in.run.loss_chunk))
          bwd[u] += fwd[u];  // DPO's chunked head makes its logits again in backward
        if (base[u].kind == model::UnitKind::kDecoderLayer) {  // a recomputed forward rings again
          ring_f[u] = ring.exposed_forward_s;
          ring_b[u] = ring.exposed_backward_s + (recompute ? ring.exposed_forward_s : 0.0);
          if (m.moe_layer(u - 1)) {
            a2a_f[u] = 2 * a2a.seconds;
            a2a_b[u] = (recompute ? 4 : 2) * a2a.seconds;
            r.all_to_all_bytes += in.grad_accum * (recompute ? 6 : 4) * a2a.sent_bytes;
            ring_f[u] += a2a_f[u];
            ring_b[u] += a2a_b[u];
          }
        }
        if (in.run.fp8 != model::Fp8Mode::kOff && base[u].kind == model::UnitKind::kDecoderLayer) {
          // The projections' GEMMs at the float8 rate (the same efficiency at its peak), the
          // casts at the memory bandwidth; attention, norms and the rest as they were.
          const Fp8Costs k = fp8_costs(m, in.run.fp8, tokens_mb, pe, !in.run.adapters.enabled(),
                                       in.run.fused_layers);
          const double fast = f - k.gemm_flops * (1 - in.gpu.peak_tflops / in.gpu.fp8_tflops);
          fwd[u] = fast / (fwd_tflops * 1e12) + k.forward_bytes / (in.gpu.hbm_gbps * 1e9);
          bwd[u] = backward_ratio * fast / (bwd_tflops * 1e12) +
                   k.backward_bytes / (in.gpu.hbm_gbps * 1e9) + (recompute ? fwd[u] : 0.0);
        }
        const double gbytes = in.run.gathered_bytes(m, base[u].kind, sizes.gathered_numel(u), pe);
        const UnitSize& t = sizes.trainable(u);
        c[u].gather = in.fabric.seconds(Op::kAllGather, gbytes, r.shard_size, shard_spans);
        const bool again = regather && base[u].kind != model::UnitKind::kHead && runs_backward[u];
        c[u].regather = again ? c[u].gather : 0;
        if (cfg.cpu_offload && sizes.trains(u) && host.pcie_gbps > 0) {
          c[u].h2d = static_cast<double>(t.shard_numel * pe) / (host.pcie_gbps * 1e9);
          c[u].h2d_again = again ? c[u].h2d : 0;
          c[u].d2h = static_cast<double>(t.shard_numel * 4) / (host.pcie_gbps * 1e9);
        }
        if (sizes.trains(u)) {
          c[u].reduce = in.fabric.seconds(Op::kReduceScatter, static_cast<double>(t.padded * re),
                                          r.shard_size, shard_spans);
          c[u].replicate =
              in.fabric.seconds(Op::kAllReduce, static_cast<double>(t.shard_numel * re), r.replicas,
                                replicate_spans && (hybrid || r.ranks > in.gpus_per_node));
        }
      }
      const int passes = static_cast<int>(in.grad_accum);
      const bool reduce_now = !cfg.no_sync_accumulation;
      // The overlapped schedule, with the copies or without (what they add is theirs). A unit's
      // copy from the host precedes its gather on the collective stream; the copies also share
      // the PCIe link, both directions added, while the unit before computes.
      double forward = 0;  // the first micro-batch's forward as scheduled, copies and all
      const auto schedule = [&](bool copies) {
        const auto h2d = [&](int u) { return copies ? c[u].h2d : 0.0; };
        const auto h2d_again = [&](int u) { return copies ? c[u].h2d_again : 0.0; };
        const auto d2h = [&](int u) { return copies ? c[u].d2h : 0.0; };
        double total = 0;
        for (int mb = 0; mb < passes; ++mb) {
          total += h2d(0) + c[0].gather;  // the first gather is exposed
          for (int u = 0; u < U; ++u)
            total += std::max(fwd[u] + ring_f[u], u + 1 < U ? h2d(u + 1) + c[u + 1].gather : 0.0);
          if (mb == 0 && copies) forward = total;
          total += h2d_again(U - 1) + c[U - 1].regather;
          for (int u = U - 1; u >= 0; --u) {
            const double before = u > 0 ? h2d_again(u - 1) : 0.0;
            const bool after = reduce_now && u + 1 < U;
            const double collectives = before + (u > 0 ? c[u - 1].regather : 0.0) +
                                       (after ? c[u + 1].reduce + c[u + 1].replicate : 0.0);
            total +=
                std::max({bwd[u] + ring_b[u], collectives, before + (after ? d2h(u + 1) : 0.0)});
          }
          if (reduce_now)  // the last reduction and its copy wait before the optimizer
            total += c[0].reduce + c[0].replicate + d2h(0);
        }
        if (cfg.no_sync_accumulation)
          for (int u = 0; u < U; ++u) total += c[u].reduce + c[u].replicate + d2h(u);
        return total;
      };
      double compute = 0, comm_total = 0;
      for (int u = 0; u < U; ++u) {
        compute += passes * (fwd[u] + bwd[u]);
        r.ring_exposed_s += passes * (ring_f[u] + ring_b[u] - a2a_f[u] - a2a_b[u]);
        r.all_to_all_s += passes * (a2a_f[u] + a2a_b[u]);
        comm_total += passes * (c[u].gather + c[u].regather) +
                      (reduce_now ? passes : 1) * (c[u].reduce + c[u].replicate);
        r.h2d_s += passes * (c[u].h2d + c[u].h2d_again);
        r.d2h_s += (reduce_now ? passes : 1) * c[u].d2h;
      }
      double total = schedule(false), with_copies = schedule(true);
      if (!in.fabric.overlaps_compute) {  // MPI on CPU: collectives progress only when waited on
        total = compute + comm_total + r.ring_exposed_s + r.all_to_all_s;
        with_copies = total + r.h2d_s + r.d2h_s;
        forward = 0;
        for (int u = 0; u < U; ++u) forward += fwd[u] + ring_f[u] + c[u].gather + c[u].h2d;
      }
      int64_t shard_elems = 0;
      for (const auto& t : sizes.trainable_units()) shard_elems += t.shard_numel;
      if (cfg.cpu_offload) {
        // AdamW on the CPU, unit by unit in forward order once every gradient is on the host (the
        // norm needs them all), beside the next step's forward, whose units wait for their step.
        // The rank's cores at the measured rate, unless the node's DRAM, shared by its ranks
        // stepping at once, cannot feed them: AdamW's bytes and the mirror's (read 4, write pe).
        double per_element = kCpuAdamSecondsPerElementCore / std::max(1, host.cores_per_gpu);
        if (host.dram_gbps > 0)
          per_element = std::max(per_element, (kAdamBytesPerElement + 4 + pe) * in.gpus_per_node /
                                                  (host.dram_gbps * 1e9));
        int64_t first = 0;
        for (const auto& t : sizes.trainable_units())
          if (first == 0) first = t.shard_numel;
        r.cpu_optimizer_s = per_element * static_cast<double>(shard_elems);
        r.optimizer_s =
            std::max(per_element * static_cast<double>(first), r.cpu_optimizer_s - forward);
      } else {
        r.optimizer_s =
            in.calibration.optimizer_s_per_element > 0
                ? in.calibration.optimizer_s_per_element * static_cast<double>(shard_elems)
                : (in.gpu.hbm_gbps > 0 ? kAdamBytesPerElement * static_cast<double>(shard_elems) /
                                             (in.gpu.hbm_gbps * 1e9)
                                       : 0);
      }
      r.compute_s = compute;
      r.comm_s = comm_total;
      r.exposed_comm_s = total - compute - r.ring_exposed_s - r.all_to_all_s;  // FSDP's collectives
      r.exposed_copy_s = with_copies - total;
      // DPO's reference model: one more forward per micro-batch, scheduled like the first.
      r.reference_s = reference == ReferenceModel::kNone ? 0.0 : passes * forward;
      r.step_s = with_copies + r.optimizer_s + r.reference_s;
      // The group's rows over its cp ranks (global tokens / step / GPUs), padding not counted.
      const double tokens_per_gpu = static_cast<double>(rows_mb * in.seq_len * in.grad_accum) / cp;
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

AllToAllCost all_to_all_cost(const PlanInput& in, int64_t tokens) {
  AllToAllCost c;
  const int n = in.fsdp.expert_parallel;
  if (n <= 1 || !in.model.is_moe()) return c;
  c.bytes = static_cast<double>(tokens * in.model.experts_per_token * in.model.hidden_size *
                                elt_of(in.fsdp.param_dtype));
  c.sent_bytes = c.bytes * (n - 1) / n;
  c.seconds = in.fabric.seconds(Op::kAllGather, c.bytes, n, n > in.gpus_per_node);
  return c;
}

RingCost ring_cost(const PlanInput& in) {
  RingCost k;
  k.n = in.context_parallel;
  k.tokens_per_rank = model::context_tokens_per_rank(in.seq_len, k.n);
  if (k.n <= 1) return k;
  const model::ModelConfig& m = in.model;
  const double kv = static_cast<double>(m.num_kv_heads * m.head_dim());
  const double t = static_cast<double>(in.batch_size * k.tokens_per_rank);  // per micro-batch
  const int n = k.n;
  k.kv_bytes = 2.0 * elt_of(in.fsdp.param_dtype) * kv * t;
  k.dkv_bytes = 2.0 * 4 * kv * t;  // ring_attention.cpp accumulates dK/dV in fp32
  k.forward_bytes = (n - 1) * k.kv_bytes;
  k.backward_bytes = (n - 1) * k.kv_bytes + n * k.dkv_bytes;
  // One hop sends a buffer to the next rank: one step of an intra-node ring all-gather of two.
  k.kv_s = in.fabric.seconds(Op::kAllGather, 2 * k.kv_bytes, 2, false);
  k.dkv_s = in.fabric.seconds(Op::kAllGather, 2 * k.dkv_bytes, 2, false);
  k.busbw_gbps = in.fabric.intra.at(Op::kAllGather).busbw(k.kv_bytes);
  k.forward_s = (n - 1) * k.kv_s;
  k.backward_s = (n - 1) * k.kv_s + n * k.dkv_s;
  // A zigzag ring step is the causal half of a (tokens per rank)^2 block: QK^T and PV.
  const double flops = static_cast<double>(in.batch_size) * 0.5 *
                       static_cast<double>(k.tokens_per_rank) *
                       static_cast<double>(k.tokens_per_rank) * 4.0 * m.num_heads * m.head_dim();
  const auto [fwd_tflops, bwd_tflops] = rates(in);
  k.block_forward_s = flops / (fwd_tflops * 1e12);
  k.block_backward_s = 2 * flops / (bwd_tflops * 1e12);
  if (!in.fabric.overlaps_compute) {  // MPI on CPU: every hop waits
    k.exposed_forward_s = k.forward_s;
    k.exposed_backward_s = k.backward_s;
    return k;
  }
  // Forward: hop i+1's K/V travel during block i. Backward: block i hides the next K/V and the
  // previous block's dK/dV (one link, added); the last dK/dV hop to the owner always waits.
  k.exposed_forward_s = (n - 1) * std::max(0.0, k.kv_s - k.block_forward_s);
  double steps = 0;
  for (int i = 0; i < n; ++i)
    steps +=
        std::max(0.0, (i + 1 < n ? k.kv_s : 0.0) + (i > 0 ? k.dkv_s : 0.0) - k.block_backward_s);
  k.exposed_backward_s = steps + k.dkv_s;
  k.hidden = k.exposed_forward_s == 0 && steps == 0;
  return k;
}

std::string fit_summary(const PlanInput& in, const PlanRow& r) {
  return std::string(fsdp::sharding_name(r.sharding)) + " on " + std::to_string(r.nodes) +
         " node(s), " + std::to_string(static_cast<int64_t>(std::lround(r.tokens_per_s_per_gpu))) +
         " tokens/s per GPU, " +
         std::to_string(std::lround(static_cast<double>(r.total) / (1 << 30))) + " GiB of " +
         std::to_string(std::lround(in.gpu.memory_bytes / (1 << 30))) + " GiB";
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
