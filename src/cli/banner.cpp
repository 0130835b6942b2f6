#include "shardtrain/cli/banner.h"
#include "shardtrain/obs/rank_summary.h"

#include "shardtrain/model/context_parallel.h"
#include "shardtrain/runtime/counted.h"

#include "option_parts.h"

#include <c10/core/ScalarType.h>

#include <cstdio>

namespace shardtrain::cli {
namespace {
const char* dtype_label(at::ScalarType t) {
  return t == at::kBFloat16 ? "bf16" : t == at::kHalf ? "fp16" : "fp32";
}
}  // namespace

std::string cadence(int64_t every, const std::string& unit) {
  if (every <= 0)
    return "only at the end";  // --save-every, --val-every and --breakdown-every take 0 so
  return "every " + (every == 1 ? unit : std::to_string(every) + " " + unit + "s");
}

std::string start_line(const TrainOptions& o) {
  const std::string name = o.model.name;
  if (o.resumes)
    return "resuming " + name + " (--resume " + o.ckpt.resume +
           (o.ckpt.resume == "auto" ? " in " + o.ckpt.dir : "") + "); model configuration from " +
           o.model_from;
  if (o.weights.empty())
    return "training " + name + " from random initialization (seed " +
           std::to_string(o.train.seed) +
           "): no --weights was given; pass --weights DIR (a Hugging Face model directory) to "
           "fine-tune pretrained weights";
  return "fine-tuning " + name + " from the weights in " + o.weights;
}

std::string start_banner(const TrainOptions& o, const runtime::Topology& topo,
                         const std::vector<std::string>& hosts, const comm::ParallelDims& g,
                         const comm::DeviceChoice& device, const BannerFacts& f) {
  const auto& m = o.model;
  const auto& t = o.train;
  const auto& op = o.optim;
  char buf[512];
  std::string b = "shardtrain train: job " + o.obs.metrics_job + "\n";
  b += "  topology    " + runtime::counted(topo.world, "rank") + " on " +
       runtime::counted(topo.num_nodes, "node") + " x " +
       runtime::counted(topo.local_size, "rank") + " per node (" + obs::host_ranges(hosts) + ")\n";
  std::snprintf(buf, sizeof buf,
                "  strategy    %s: shard groups of %d, %s | param %s, reduce %s | "
                "activation checkpointing %s | "
                "in-flight gathers %d | persistent %lld KiB per rank of %lld KiB unsharded\n",
                fsdp::sharding_name(o.fsdp.sharding), g.shard->size(),
                runtime::counted(g.replicate->size(), "replica").c_str(),
                dtype_label(o.fsdp.param_dtype), dtype_label(o.fsdp.reduce_dtype),
                fsdp::describe(o.fsdp.activation_checkpointing).c_str(),
                o.fsdp.max_inflight_gathers, static_cast<long long>(f.persistent_bytes >> 10),
                static_cast<long long>(f.unsharded_bytes >> 10));
  b += buf;
  if (g.context->size() > 1) {
    const int n = g.context->size();
    const int64_t padded = model::context_padded_length(f.seq_len, n);
    const std::string pad = padded == f.seq_len
                                ? ""
                                : " | rows padded from " + std::to_string(f.seq_len) + " to " +
                                      std::to_string(padded) + " tokens (no loss, seen by none)";
    std::snprintf(buf, sizeof buf,
                  "  context     --context-parallel %d: each row split into %d zigzag chunks of "
                  "%lld tokens over %d ranks, attention as a ring | %s%s\n",
                  n, 2 * n, static_cast<long long>(padded / (2 * n)), n,
                  runtime::counted(topo.world / n, "data-parallel group").c_str(), pad.c_str());
    b += buf;
  }
  if (o.fsdp.cpu_offload) {
    std::snprintf(buf, sizeof buf,
                  "  offload     --cpu-offload: %lld KiB per rank in %s host memory (fp32 master, "
                  "AdamW, gradients, a %s mirror); AdamW on the CPU\n",
                  static_cast<long long>(f.host_bytes >> 10), device.cuda ? "pinned" : "separate",
                  dtype_label(o.fsdp.param_dtype));
    b += buf;
  }
  if (o.run.adapters.enabled()) {
    const auto& l = o.run.adapters;
    std::snprintf(buf, sizeof buf,
                  "  lora        rank %lld, alpha %g, dropout %g, targets %s: %lld trainable "
                  "parameters | per rank: "
                  "frozen base %lld KiB (%s), adapters %lld KiB (fp32 master + AdamW)\n",
                  static_cast<long long>(l.rank), l.alpha, l.dropout,
                  model::join_lora_targets(l.targets).c_str(),
                  static_cast<long long>(f.adapter_params),
                  static_cast<long long>(f.base_bytes >> 10), dtype_label(o.fsdp.param_dtype),
                  static_cast<long long>(f.adapter_bytes >> 10));
    b += buf;
  }
  // What the decoder layers run: a user who passed --fused-layers or --fp8 sees it took.
  const std::string layers =
      std::string(o.run.fused_layers ? "fused decoder layers (--fused-layers)"
                                     : "composite decoder layers") +
      (o.run.fp8 != model::Fp8Mode::kOff
           ? std::string(", float8 projections (--fp8 ") + model::fp8_mode_name(o.run.fp8) + ")"
           : "");
  std::snprintf(buf, sizeof buf, "  device      %s, %s per rank | %s\n",
                device.cuda ? (device.name + " + NCCL").c_str() : "cpu + MPI",
                runtime::counted(f.threads, "CPU thread").c_str(), layers.c_str());
  b += buf;
  std::snprintf(buf, sizeof buf,
                "  model       %s: %lld layers, hidden %lld, ffn %lld, %lld heads (%lld kv), vocab "
                "%lld, %lld parameters%s\n",
                m.name.c_str(), static_cast<long long>(m.num_layers),
                static_cast<long long>(m.hidden_size), static_cast<long long>(m.intermediate_size),
                static_cast<long long>(m.num_heads), static_cast<long long>(m.num_kv_heads),
                static_cast<long long>(m.vocab_size), static_cast<long long>(f.num_params),
                o.weights.empty()
                    ? (o.resumes ? std::string(", weights from the checkpoint")
                                 : ", random initialization (seed " + std::to_string(t.seed) + ")")
                          .c_str()
                    : (", weights " + o.weights + " (" + std::to_string(f.weights_bytes_read) +
                       " bytes read by rank 0)")
                          .c_str());
  b += buf;
  const int cp = g.context->size();  // a context group's ranks share their rows
  const std::string reader = cp > 1 ? "group of " + std::to_string(cp) + " ranks" : "rank";
  const char* unit = f.format == "preference" ? "pair" : "row";  // --batch-size counts these
  std::snprintf(
      buf, sizeof buf,
      "  data        %s: %lld rows of %lld tokens (%s, %s), global batch %s (%lld per %s "
      "x %lld "
      "accumulation x %s)%s\n",
      o.data.c_str(), static_cast<long long>(f.train_rows), static_cast<long long>(f.seq_len),
      f.packing.c_str(), f.format.c_str(), runtime::counted(f.global_batch, unit).c_str(),
      static_cast<long long>(t.batch_size), reader.c_str(), static_cast<long long>(t.grad_accum),
      runtime::counted(topo.world / cp, cp > 1 ? "group" : "rank").c_str(),
      o.val_data.empty()
          ? ""
          : ("; validation " + o.val_data + ": " + std::to_string(f.val_rows) + " rows").c_str());
  b += buf;
  std::snprintf(buf, sizeof buf,
                "  optimizer   AdamW lr %s (%s, warmup %lld), betas %g/%g, weight decay %g, clip "
                "%g | steps %lld | seed %llu\n",
                parts::round_trip(op.schedule.base_lr).c_str(), op.schedule.kind.c_str(),
                static_cast<long long>(op.schedule.warmup_steps), op.adamw.beta1, op.adamw.beta2,
                op.adamw.weight_decay, op.grad_clip, static_cast<long long>(t.steps),
                static_cast<unsigned long long>(t.seed));
  b += buf;
  const std::string ckpt =
      o.ckpt.dir.empty() ? "off"
                         : o.ckpt.dir + " (" + cadence(o.ckpt.save_every, "step") + ", resume " +
                               (o.ckpt.resume.empty() ? "off" : o.ckpt.resume) + ")";
  const std::string model_out =
      o.save_model.empty() ? "not saved (--save-model DIR)" : o.save_model;
  std::snprintf(buf, sizeof buf, "  outputs     model %s | checkpoints %s | metrics %s\n",
                model_out.c_str(), ckpt.c_str(),
                t.metrics_file.empty() ? "off" : t.metrics_file.c_str());
  b += buf;
  const bool validates = !o.val_data.empty() || !o.accuracy.file.empty();
  std::snprintf(
      buf, sizeof buf,
      "  observe     progress %s, breakdown %s | validation %s | Prometheus %s | collective "
      "timeout %s",
      cadence(t.log_every, "step").c_str(), cadence(t.breakdown_every, "progress line").c_str(),
      validates ? cadence(t.val_every, "step").c_str() : "off",
      o.obs.metrics_port
          ? (o.obs.metrics_bind + ":" + std::to_string(o.obs.metrics_port) + "/metrics").c_str()
          : "off",
      o.obs.collective_timeout > 0
          ? (std::to_string(static_cast<int>(o.obs.collective_timeout)) + " s").c_str()
          : "off");
  return b + buf;
}

}  // namespace shardtrain::cli
