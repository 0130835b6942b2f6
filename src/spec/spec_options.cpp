#include "shardtrain/spec/spec_options.h"

#include <cstdlib>

#include "shardtrain/fsdp/activation_checkpointing.h"
#include "shardtrain/model/fp8.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::spec {

void add_layout_options(po::options_description& d, fsdp::ShardingConfig& f, int& context_parallel,
                        SpecArgs& raw, bool training) {
  raw.reduce_dtype = dtype_name(f.reduce_dtype);
  d.add_options()("shard-group-size",
                  po::value(&f.shard_group_size)->default_value(f.shard_group_size),
                  "hybrid: ranks per shard group (0: one node)")(
      "context-parallel", po::value(&context_parallel)->default_value(context_parallel),
      "split each sequence over N consecutive ranks of a node (2N zigzag chunks, attention as a "
      "ring; --batch-size counts rows per group of N; docs/context-parallel.md); 1: off (plan: "
      "not given, it names the smallest that fits)")(
      "expert-parallel", po::value(&f.expert_parallel)->default_value(f.expert_parallel),
      "mixture of experts: split each sparse layer's experts over N consecutive ranks of a shard "
      "group, tokens sent to them and back by all-to-all; the experts shard over the ranks "
      "holding the same ones (docs/moe.md); 1: off")(
      "param-dtype", po::value(&raw.param_dtype)->default_value(raw.param_dtype),
      "compute and all-gather dtype: auto (bf16 on CUDA, fp32 on CPU), fp32 or bf16 (master "
      "weights stay fp32)")(
      "max-inflight-gathers",
      po::value(&f.max_inflight_gathers)->default_value(f.max_inflight_gathers),
      "units gathered at once, the computing one included (2: prefetch one ahead; bounds memory)");
  if (!training) return;
  d.add_options()("reduce-dtype", po::value(&raw.reduce_dtype)->default_value(raw.reduce_dtype),
                  "gradient reduction dtype: fp32 or bf16")(
      "no-sync-accumulation", po::bool_switch(&f.no_sync_accumulation),
      "with --grad-accum: reduce once per step from unsharded fp32 grads (4 bytes x parameters "
      "more per rank)")(
      "cpu-offload", po::bool_switch(&f.cpu_offload),
      "keep the fp32 master weights, AdamW's moments and the gradient shards in host memory and "
      "step AdamW on the CPU, unit by unit (a full fine-tune that does not fit the GPU; "
      "docs/fsdp.md)")("fp8", po::value(&raw.fp8)->default_value(raw.fp8),
                       "off, tensorwise or rowwise: the decoder layers' projections multiply in "
                       "float8 (e4m3 weights and activations, e5m2 gradients, scales from each "
                       "tensor's or row's amax); needs float8 tensor cores (H100, H200, L40S; "
                       "docs/gpu.md)")(
      "no-fp8-all-gather", po::bool_switch(&raw.no_fp8_all_gather),
      "with --fp8 tensorwise: all-gather the projections' weights in the compute dtype, not in "
      "float8 (rowwise always gathers in the compute dtype)")(
      "loss-chunk", po::value(&raw.loss_chunk)->default_value(raw.loss_chunk),
      "the head's matmul and the cross-entropy fused, over chunks of this many tokens, so fp32 "
      "logits never exist for the whole batch: auto (a chunk of logits about the hidden states' "
      "size), N, or off (unfused)")(
      "activation-checkpointing",
      po::value(&raw.activation_checkpointing)
          ->default_value(raw.activation_checkpointing)
          ->implicit_value("full"),
      "what decoder layers recompute in backward instead of keeping: none; selective (the "
      "RMSNorms and the MLP's activation; the matmuls' and attention's outputs are kept); full "
      "(the whole layer from its input). The bare flag: full")(
      "ac-every", po::value(&raw.ac_every)->default_value(raw.ac_every),
      "with --activation-checkpointing: only decoder layers whose index is a multiple of N (2: "
      "every other layer)");
}

void add_batch_options(po::options_description& d, int64_t& batch_size, int64_t& grad_accum) {
  d.add_options()("batch-size", po::value(&batch_size)->default_value(batch_size),
                  "micro-batch size per rank (rows of seq_len; pairs under --objective dpo)")(
      "grad-accum", po::value(&grad_accum)->default_value(grad_accum),
      "micro-batches per optimizer step");
}

void add_objective_options(po::options_description& d, std::string& objective,
                           std::string& reference_logps) {
  d.add_options()("objective", po::value(&objective)->default_value(objective),
                  "sft (next-token loss on the answers) or dpo (direct preference optimisation "
                  "on chosen/rejected pairs)")(
      "reference-logps", po::value(&reference_logps),
      "the reference's log-probabilities of --data, from 'shardtrain eval --save-logps': no "
      "reference model in memory (plan: no file is read)");
}

void resolve_layout(fsdp::ShardingConfig& f, model::RunPlan& run, const SpecArgs& raw,
                    bool training) {
  f.param_dtype = raw.param_dtype == "auto" ? at::ScalarType::Undefined
                                            : parse_dtype(raw.param_dtype, "--param-dtype");
  if (!training) return;
  f.reduce_dtype = parse_dtype(raw.reduce_dtype, "--reduce-dtype");
  run.loss_chunk = parse_loss_chunk(raw.loss_chunk);
  run.fp8 = model::parse_fp8_mode(raw.fp8);
  run.fp8_all_gather = !raw.no_fp8_all_gather;
  f.activation_checkpointing =
      fsdp::parse_activation_checkpointing(raw.activation_checkpointing, raw.ac_every);
}

bool resolve_objective(const std::string& objective) {
  if (objective != "sft" && objective != "dpo")
    throw runtime::UsageError("--objective must be sft or dpo, got '" + objective + "'");
  return objective == "dpo";
}

at::ScalarType parse_dtype(const std::string& s, const char* opt) {
  if (s == "fp32" || s == "float32") return at::kFloat;
  if (s == "bf16" || s == "bfloat16") return at::kBFloat16;
  throw runtime::UsageError(std::string(opt) + " must be fp32 or bf16" +
                            (std::string(opt) == "--param-dtype" ? " (or auto)" : "") + ", got '" +
                            s + "'");
}

const char* dtype_name(at::ScalarType t) {
  return t == at::kBFloat16 ? "bf16" : t == at::kFloat ? "fp32" : "auto";
}

int64_t parse_loss_chunk(const std::string& v) {
  if (v == "auto") return 0;
  if (v == "off") return -1;
  char* end = nullptr;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || n < 1 || n > (1ll << 40))
    throw runtime::UsageError("--loss-chunk must be auto, off or a number of tokens >= 1, got '" +
                              v + "'");
  return n;
}

}  // namespace shardtrain::spec
