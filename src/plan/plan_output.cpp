#include "shardtrain/plan/plan_output.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <sstream>

#include "shardtrain/model/activation_memory.h"
#include "shardtrain/plan/objective_text.h"
#include "shardtrain/plan/remedy.h"
#include "shardtrain/report/chart.h"
#include "shardtrain/runtime/counted.h"

namespace shardtrain::plan {
namespace {

double gib(int64_t b) { return static_cast<double>(b) / (1 << 30); }
double gib(double b) { return b / (1 << 30); }

std::string describe(const PlanInput& in) {
  std::ostringstream os;
  os << in.model.name << " (" << in.model.num_params() / 1000000 << "M parameters), " << in.gpu.name
     << " x " << in.gpus_per_node << " per node, fabric " << in.fabric.name << "; seq "
     << in.seq_len << (in.packed ? " packed" : "")
     << (in.context_parallel > 1
             ? ", context parallel " + std::to_string(in.context_parallel) + " (" +
                   std::to_string(model::context_tokens_per_rank(in.seq_len, in.context_parallel)) +
                   " tokens per rank per row)"
             : "")
     << ", batch "
     << (in.objective.dpo ? runtime::counted(in.batch_size, "pair") : std::to_string(in.batch_size))
     << (in.context_parallel > 1 ? " per context group" : " per rank") << ", grad-accum "
     << in.grad_accum << ", " << c10::toString(in.fsdp.param_dtype) << " params, "
     << c10::toString(in.fsdp.reduce_dtype) << " reduce"
     << (in.fsdp.activation_checkpointing
             ? ", activation checkpointing " + fsdp::describe(in.fsdp.activation_checkpointing)
             : "")
     << (in.run.adapters.enabled() ? ", LoRA rank " + std::to_string(in.run.adapters.rank) : "")
     << (in.fsdp.cpu_offload ? ", CPU offload" : "")
     << (in.fsdp.expert_parallel > 1
             ? ", expert parallel " + std::to_string(in.fsdp.expert_parallel) + " (" +
                   std::to_string(in.model.num_experts / in.fsdp.expert_parallel) +
                   " experts per rank per layer)"
             : "")
     << (in.run.fp8 != model::Fp8Mode::kOff
             ? std::string(", FP8 ") + model::fp8_mode_name(in.run.fp8)
             : "")
     << describe_objective(in) << "; compute "
     << (in.calibration.source.empty()
             ? "at " + std::to_string(static_cast<int>(std::lround(in.default_mfu * 100))) +
                   "% MFU (default)"
             : "calibrated from " + in.calibration.source);
  return os.str();
}

// The ring's line under the table: its bytes and time per layer, and whether the blocks hide it.
std::string ring_line(const PlanInput& in) {
  const RingCost k = ring_cost(in);
  const double mb = 1e6, ms = 1e-3;
  char line[1200];
  std::snprintf(
      line, sizeof line,
      "context parallel %d, ring per layer and micro-batch: forward %d x %.1f MB of K/V = %.1f MB "
      "in %.3f ms, backward %d x %.1f MB of K/V + %d x %.1f MB of fp32 dK/dV = %.1f MB in %.3f "
      "ms, at %.0f GB/s (the fabric's intra-node all-gather busbw); block attention per ring "
      "step %.3f ms forward, %.3f ms backward: ",
      k.n, k.n - 1, k.kv_bytes / mb, k.forward_bytes / mb, k.forward_s / ms, k.n - 1,
      k.kv_bytes / mb, k.n, k.dkv_bytes / mb, k.backward_bytes / mb, k.backward_s / ms,
      k.busbw_gbps, k.block_forward_s / ms, k.block_backward_s / ms);
  std::string out = line;
  if (k.hidden)
    std::snprintf(line, sizeof line,
                  "hidden, but for the last dK/dV hop of each layer's backward (%.3f ms)",
                  k.dkv_s / ms);
  else
    std::snprintf(line, sizeof line,
                  "NOT hidden, exposed %.3f ms forward and %.3f ms backward per layer",
                  k.exposed_forward_s / ms, k.exposed_backward_s / ms);
  return out + line + "; ring-exp: the ring's share of the step that waits\n";
}

// The headroom of the memory that binds: the host's per node where the offloaded state does not
// fit it (a row the device alone would pass), else the device's.
double binding_headroom(const PlanRow& r) {
  return r.host_fits ? r.headroom
                     : r.host_memory_bytes - static_cast<double>(r.host_bytes_per_node);
}

}  // namespace

std::string plan_table(const PlanInput& in, const std::vector<PlanRow>& rows) {
  std::ostringstream os;
  os << "# plan: " << describe(in) << "\n";
  char line[400];
  const bool offload = in.fsdp.cpu_offload;
  std::snprintf(line, sizeof line,
                "%-19s %5s %6s %6s  %8s  %10s %8s %8s %8s %8s  %-4s %9s  %9s %8s %10s %7s %6s",
                "strategy", "nodes", "ranks", "shard", "sharded", "state@peak", "gathered",
                "activ.", "other", "peak", "fits", "headroom", "step(s)", "exposed", "tok/s/GPU",
                "MFU", "eff.");
  os << line;
  if (offload) {  // the offload's own columns, after the others
    std::snprintf(line, sizeof line, "  %10s %8s %8s %8s %8s", "host/node", "copy(s)", "copy-exp",
                  "adam(s)", "adam-exp");
    os << line;
  }
  const bool ring = in.context_parallel > 1;
  if (ring) os << "  ring-exp";
  const bool experts = in.fsdp.expert_parallel > 1;
  if (experts) os << "  a2a-exp";
  const bool ref = reference_model(in.objective, in.run.adapters.enabled()) ==
                   ReferenceModel::kFrozenCopy;  // DPO's frozen copy
  if (ref) os << "  " << std::setw(8) << "ref.";
  os << "\n";
  for (const auto& r : rows) {
    const int64_t other = r.total - r.state_at_peak() - r.gathered - r.activations - r.reference;
    std::snprintf(line, sizeof line,
                  "%-19s %5d %6d %6d  %7.2fG  %9.2fG %7.2fG %7.2fG %7.2fG %7.2fG  %-4s %8.2fG  "
                  "%9.3f %7.0f%% %10.0f %6.1f%% %5.0f%%",
                  fsdp::sharding_name(r.sharding), r.nodes, r.ranks, r.shard_size,
                  gib(r.sharded_state()), gib(r.state_at_peak()), gib(r.gathered),
                  gib(r.activations), gib(other), gib(r.total), r.fits ? "yes" : "NO",
                  gib(binding_headroom(r)), r.step_s, 100 * r.exposed_comm_s / r.step_s,
                  r.tokens_per_s_per_gpu, 100 * r.mfu, 100 * r.efficiency);
    os << line;
    if (offload) {
      std::snprintf(line, sizeof line, "  %9.1fG %8.3f %7.0f%% %8.3f %7.0f%%",
                    gib(r.host_bytes_per_node), r.h2d_s + r.d2h_s,
                    100 * r.exposed_copy_s / r.step_s, r.cpu_optimizer_s,
                    100 * r.optimizer_s / r.step_s);
      os << line;
    }
    if (ring) {
      std::snprintf(line, sizeof line, "  %7.1f%%", 100 * r.ring_exposed_s / r.step_s);
      os << line;
    }
    if (experts) {
      std::snprintf(line, sizeof line, "  %6.1f%%", 100 * r.all_to_all_s / r.step_s);
      os << line;
    }
    if (ref) {
      std::snprintf(line, sizeof line, "  %7.2fG", gib(r.reference));
      os << line;
    }
    os << "\n";
  }
  // A row the host's memory refuses says so: the device's columns alone would read as a fit.
  for (const auto& r : rows)
    if (!r.host_fits) {
      std::snprintf(line, sizeof line,
                    "%s on %d node(s) does not fit the host: %.1f GiB of offloaded state per node "
                    "(%d rank(s) x %.1f GiB) exceeds %.1f GiB",
                    fsdp::sharding_name(r.sharding), r.nodes, gib(r.host_bytes_per_node),
                    in.gpus_per_node, gib(r.state.host_bytes), gib(r.host_memory_bytes));
      os << line
         << (in.host_memory_bytes > 0 ? " (--host-memory-gib)"
                                      : " (" + host_spec(in.gpu).instance + "; --host-memory-gib)")
         << "\n";
    }
  const PlanRow* best = best_row(rows);
  if (best)
    os << "best that fits: " << fit_summary(in, *best) << "\n";
  else
    os << remedy_text(in, rows, search_remedy(in, rows));
  if (ring) os << ring_line(in);
  if (experts && !rows.empty()) {
    const AllToAllCost a = all_to_all_cost(
        in, in.batch_size * model::context_tokens_per_rank(in.seq_len, in.context_parallel));
    std::snprintf(line, sizeof line,
                  "expert parallel %d: each sparse layer sends a micro-batch's tokens to their "
                  "experts' ranks and back, %.1f MB per all-to-all of which %.1f MB leave the "
                  "rank, %.3f ms each; 2 in forward, 2 in backward (2 more recomputed), %.2f GB "
                  "sent per rank per step; a2a-exp: their share of the step (the layer waits)\n",
                  in.fsdp.expert_parallel, a.bytes / 1e6, a.sent_bytes / 1e6, a.seconds * 1e3,
                  rows.front().all_to_all_bytes / 1e9);
    os << line;
  }
  os << objective_line(in, rows);
  os << "sharded: parameters (fp32 master), gradients and optimizer state per rank once every "
        "gradient shard exists, at the "
        "optimizer step (and no-sync buffers, a LoRA base); the same with or without activation "
        "checkpointing\n"
        "peak = state@peak + gathered + activ. + other"
     << (ref ? " + ref." : "")
     << ": state@peak holds only the gradient shards "
        "of the units reduced by the "
        "peak's moment (more under activation checkpointing, whose peak comes later in the "
        "backward); other: reductions in "
        "flight, the NCCL and allocator allowances; exposed: communication not hidden behind "
        "compute, share of the step\n";
  if (offload) {
    const HostSpec host = host_spec(in.gpu);
    const double memory = in.host_memory_bytes > 0 ? in.host_memory_bytes : host.memory_bytes;
    os << "--cpu-offload: sharded is what stays on the device (a LoRA base, no-sync buffers), "
          "other includes the shards copied from the host for gathers in flight; host/node: "
          "the ranks' fp32 master, AdamW moments, fp32 gradients and compute-dtype mirror ("
       << fsdp::offloaded_bytes_per_element(static_cast<int>(c10::elementSize(in.fsdp.param_dtype)))
       << " bytes per trainable shard element) against "
       << (memory > 0 ? std::to_string(std::lround(gib(memory))) + " GiB per node (" +
                            (in.host_memory_bytes > 0
                                 ? std::string("--host-memory-gib")
                                 : "a " + host.instance +
                                       "'s, whatever the GPUs per "
                                       "node; give your host's with --host-memory-gib") +
                            "); headroom: the host's in a row it refuses"
                      : std::string("nothing: host memory unknown, not checked "
                                    "(--host-memory-gib)"))
       << "; copy(s): host-to-device and device-to-host copies per step at "
       << (host.pcie_gbps > 0 ? std::to_string(std::lround(host.pcie_gbps)) + " GB/s"
                              : std::string("no cost (the device is the host)"))
       << ", copy-exp: their share of the step not hidden behind compute; adam(s): AdamW on "
       << std::max(1, host.cores_per_gpu)
       << " CPU core(s) per rank, adam-exp: its share of the step the next forward does not "
          "hide\n";
  }
  return os.str();
}

std::string plan_csv(const std::vector<PlanRow>& rows) {
  std::ostringstream os;
  os << "strategy,nodes,ranks,shard_size,replicas,params_bytes,grads_bytes,optimizer_bytes,no_sync_"
        "bytes,base_bytes,"
        "sharded_state_bytes,grads_at_peak_bytes,gathered_bytes,reductions_bytes,activations_bytes,"
        "nccl_bytes,allocator_bytes,"
        "total_bytes,fits,headroom_bytes,"
        "compute_s,comm_s,exposed_comm_s,optimizer_s,step_s,tokens_per_s_per_gpu,mfu,efficiency,"
        "staging_bytes,host_bytes,host_bytes_per_node,host_memory_bytes,host_fits,"
        "h2d_s,d2h_s,exposed_copy_s,cpu_optimizer_s,context_parallel,ring_exposed_s,"
        "reference_bytes,reference_host_bytes,reference_peak_bytes,reference_s\n";
  for (const auto& r : rows)
    os << fsdp::sharding_name(r.sharding) << ',' << r.nodes << ',' << r.ranks << ',' << r.shard_size
       << ',' << r.replicas << ',' << r.state.param_bytes << ',' << r.state.grad_bytes << ','
       << r.state.optimizer_bytes << ',' << r.state.no_sync_bytes << ',' << r.state.base_bytes
       << ',' << r.sharded_state() << ',' << r.grads_at_peak << ',' << r.gathered << ','
       << r.reductions << ',' << r.activations << ',' << r.nccl << ',' << r.allocator << ','
       << r.total << ',' << (r.fits ? 1 : 0) << ',' << static_cast<int64_t>(r.headroom) << ','
       << r.compute_s << ',' << r.comm_s << ',' << r.exposed_comm_s << ',' << r.optimizer_s << ','
       << r.step_s << ',' << r.tokens_per_s_per_gpu << ',' << r.mfu << ',' << r.efficiency << ','
       << r.staging << ',' << r.state.host_bytes << ',' << r.host_bytes_per_node << ','
       << static_cast<int64_t>(r.host_memory_bytes) << ',' << (r.host_fits ? 1 : 0) << ','
       << r.h2d_s << ',' << r.d2h_s << ',' << r.exposed_copy_s << ',' << r.cpu_optimizer_s << ','
       << r.context_parallel << ',' << r.ring_exposed_s << ',' << r.reference << ','
       << r.reference_host << ',' << r.reference_peak << ',' << r.reference_s << '\n';
  return os.str();
}

nlohmann::json plan_json(const PlanInput& in, const std::vector<PlanRow>& rows) {
  nlohmann::json j;
  j["description"] = describe(in);
  j["gpu"] = {{"name", in.gpu.name},
              {"peak_tflops", in.gpu.peak_tflops},
              {"memory_bytes", in.gpu.memory_bytes},
              {"fp8_tflops", in.gpu.fp8_tflops}};
  j["fp8"] = model::fp8_mode_name(in.run.fp8);
  j["fabric"] = {{"name", in.fabric.name}, {"source", in.fabric.source}};
  if (in.fsdp.cpu_offload) {
    const HostSpec host = host_spec(in.gpu);
    j["cpu_offload"] = {
        {"instance", host.instance},
        {"host_memory_bytes", in.host_memory_bytes > 0 ? in.host_memory_bytes : host.memory_bytes},
        {"cores_per_rank", std::max(1, host.cores_per_gpu)},
        {"pcie_gbps", host.pcie_gbps}};
  }
  const RingCost k = ring_cost(in);
  j["context_parallel"] = {{"size", in.context_parallel},
                           {"given", in.context_parallel_given},
                           {"tokens_per_rank_per_row", k.tokens_per_rank}};
  if (k.n > 1)  // per decoder layer and micro-batch, one rank
    j["context_parallel"]["ring"] = {{"kv_hop_bytes", k.kv_bytes},
                                     {"dkv_hop_bytes", k.dkv_bytes},
                                     {"forward_bytes_per_layer", k.forward_bytes},
                                     {"backward_bytes_per_layer", k.backward_bytes},
                                     {"busbw_gbps", k.busbw_gbps},
                                     {"forward_s_per_layer", k.forward_s},
                                     {"backward_s_per_layer", k.backward_s},
                                     {"block_forward_s", k.block_forward_s},
                                     {"block_backward_s", k.block_backward_s},
                                     {"exposed_forward_s_per_layer", k.exposed_forward_s},
                                     {"exposed_backward_s_per_layer", k.exposed_backward_s},
                                     {"hidden", k.hidden}};
  // Only when nothing fits: the cheapest change that fits (options empty: none), and the context
  // search's part of it (size 0: none fits; null where it could not run).
  const Remedy rem = search_remedy(in, rows);
  j["remedy"] =
      rem.ran
          ? nlohmann::json{{"options", rem.options()},
                           {"activation_checkpointing_full", rem.checkpointing},
                           {"context_parallel", rem.context_parallel},
                           {"strategy", rem.found() ? fsdp::sharding_name(rem.best.sharding) : ""},
                           {"nodes", rem.best.nodes},
                           {"tokens_per_s_per_gpu", rem.best.tokens_per_s_per_gpu},
                           {"total_bytes", rem.best.total},
                           {"unshardable_bytes", rem.unshardable_bytes},
                           {"activations_bind", rem.activations_bind}}
          : nlohmann::json();
  j["smallest_context_parallel"] =
      rem.context_searched
          ? nlohmann::json{{"size", rem.context_parallel},
                           {"tried", rem.context_sizes},
                           {"with_activation_checkpointing_full",
                            rem.context_parallel > 1 && rem.checkpointing},
                           {"strategy",
                            rem.context_parallel > 1 ? fsdp::sharding_name(rem.best.sharding) : ""},
                           {"nodes", rem.best.nodes},
                           {"tokens_per_s_per_gpu", rem.best.tokens_per_s_per_gpu},
                           {"total_bytes", rem.best.total}}
          : nlohmann::json();
  const ReferenceModel rm = reference_model(in.objective, in.run.adapters.enabled());
  j["objective"] = {
      {"name", in.objective.dpo ? "dpo" : "sft"},
      {"rows_per_micro_batch", micro_batch_rows(in.objective, in.batch_size)},
      {"head_recomputes_logits", head_recomputes_logits(in.objective, in.run.loss_chunk)},
      {"reference", rm == ReferenceModel::kFrozenCopy ? "frozen_copy"
                    : rm == ReferenceModel::kBase     ? "base_adapters_off"
                    : in.objective.dpo                ? "reference_logps"
                                                      : "none"}};
  j["compute_tflops"] = in.calibration.compute_tflops > 0 ? in.calibration.compute_tflops
                                                          : in.gpu.peak_tflops * in.default_mfu;
  j["rows"] = nlohmann::json::array();
  for (const auto& r : rows)
    j["rows"].push_back({{"strategy", fsdp::sharding_name(r.sharding)},
                         {"nodes", r.nodes},
                         {"ranks", r.ranks},
                         {"shard_size", r.shard_size},
                         {"replicas", r.replicas},
                         {"context_parallel", r.context_parallel},
                         {"expert_parallel",
                          {{"size", r.expert_parallel},
                           {"all_to_all_s", r.all_to_all_s},
                           {"all_to_all_bytes", r.all_to_all_bytes}}},
                         {"memory",
                          {{"params", r.state.param_bytes},
                           {"grads", r.state.grad_bytes},
                           {"optimizer", r.state.optimizer_bytes},
                           {"no_sync", r.state.no_sync_bytes},
                           {"base", r.state.base_bytes},
                           {"sharded_state", r.sharded_state()},
                           {"grads_at_peak", r.grads_at_peak},
                           {"gathered", r.gathered},
                           {"gathered_units", r.gathered_units},
                           {"reductions", r.reductions},
                           {"activations", r.activations},
                           {"nccl", r.nccl},
                           {"allocator", r.allocator},
                           {"staging", r.staging},
                           {"reference", r.reference},
                           {"reference_host", r.reference_host},
                           {"reference_peak", r.reference_peak},
                           {"tensor_peak", r.tensor_peak},
                           {"engine_peak", r.engine_peak},
                           {"total", r.total}}},
                         {"fits", r.fits},
                         {"headroom_bytes", r.headroom},
                         {"host",
                          {{"bytes_per_rank", r.state.host_bytes},
                           {"bytes_per_node", r.host_bytes_per_node},
                           {"memory_bytes", r.host_memory_bytes},
                           {"fits", r.host_fits}}},
                         {"time",
                          {{"compute_s", r.compute_s},
                           {"comm_s", r.comm_s},
                           {"exposed_comm_s", r.exposed_comm_s},
                           {"optimizer_s", r.optimizer_s},
                           {"h2d_s", r.h2d_s},
                           {"d2h_s", r.d2h_s},
                           {"exposed_copy_s", r.exposed_copy_s},
                           {"cpu_optimizer_s", r.cpu_optimizer_s},
                           {"ring_exposed_s", r.ring_exposed_s},
                           {"reference_s", r.reference_s},
                           {"step_s", r.step_s}}},
                         {"tokens_per_s_per_gpu", r.tokens_per_s_per_gpu},
                         {"mfu", r.mfu},
                         {"efficiency", r.efficiency}});
  const PlanRow* best = best_row(rows);
  j["best"] = best ? nlohmann::json{{"strategy", fsdp::sharding_name(best->sharding)},
                                    {"nodes", best->nodes}}
                   : nlohmann::json();
  return j;
}

void plan_png(const std::string& path, const PlanInput& in, const std::vector<PlanRow>& rows) {
  report::Panel eff{"Scaling efficiency, " + in.model.name + " on " + in.gpu.name,
                    "nodes",
                    "efficiency (%)",
                    {},
                    0.0,
                    105.0,
                    true};
  report::Panel tps{
      "Tokens/s per GPU (dashed: does not fit)", "nodes", "tokens/s per GPU", {}, 0.0, {}, true};
  size_t colour = 0;
  for (size_t i = 0; i < rows.size();) {
    report::Series e, t, t_no;
    t.name = fsdp::sharding_name(rows[i].sharding);
    e.name = t.name;
    t_no.color = report::palette_color(colour++);
    t.color = t_no.color;
    e.color = t_no.color;
    t.markers = true;
    e.markers = t.markers;
    t_no.dashed = true;
    const auto s = rows[i].sharding;
    for (; i < rows.size() && rows[i].sharding == s; ++i) {
      e.x.push_back(rows[i].nodes);
      e.y.push_back(100 * rows[i].efficiency);
      t_no.x.push_back(rows[i].nodes);
      t_no.y.push_back(rows[i].tokens_per_s_per_gpu);
      t.x.push_back(rows[i].nodes);
      t.y.push_back(rows[i].fits ? rows[i].tokens_per_s_per_gpu : NAN);
    }
    eff.series.push_back(e);
    tps.series.push_back(t_no);
    tps.series.push_back(t);
  }
  report::draw_chart_png(path, {eff, tps}, 2);
}

}  // namespace shardtrain::plan
