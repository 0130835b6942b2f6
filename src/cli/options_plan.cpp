// Options of `shardtrain plan` (the description lives with the other commands' in this module).
#include <algorithm>
#include <sstream>

#include "option_parts.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::cli {
using namespace parts;

namespace {

std::vector<int> parse_nodes(const std::string& csv) {
  std::vector<int> out;
  std::stringstream ss(csv);
  for (std::string item; std::getline(ss, item, ',');) {
    size_t used = 0;
    int n = 0;
    try {
      n = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || n < 1)
      throw runtime::UsageError("--nodes '" + csv +
                                "' must be node counts >= 1 separated by commas, e.g. 1,2,4,8,16");
    out.push_back(n);
  }
  if (out.empty())
    throw runtime::UsageError("--nodes is empty; give node counts such as 1,2,4,8,16");
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace

PlanOptions parse_plan(const std::vector<std::string>& args, std::string* help_text) {
  PlanOptions o;
  plan::PlanInput& in = o.input;
  ModelArgs m;
  LoraArgs lora;
  std::string gpu = "h100-80gb", fabric = "p5", nodes = "1,2,4,8,16,32,64", strategy = "all",
              param_dtype = "bf16", fp8 = "off", reduce_dtype = dtype_name(in.fsdp.reduce_dtype),
              calibrate, loss_chunk = "auto";
  std::string ac_mode = "none", context_parallel, objective = "sft";
  int64_t ac_every = 1;
  double gpu_memory_gb = 0, host_memory_gib = 0;
  bool no_allowances = false;
  po::options_description d("Plan");
  d.add_options()("gpu", po::value(&gpu)->default_value(gpu),
                  "h100-80gb, h200-141gb, a100-80gb or a100-40gb")(
      "gpus-per-node", po::value(&in.gpus_per_node)->default_value(in.gpus_per_node),
      "GPUs (ranks) per node")("nodes", po::value(&nodes)->default_value(nodes),
                               "node counts to plan, comma-separated")(
      "strategy", po::value(&strategy)->default_value(strategy),
      "all, or one of full_shard, shard_grad_op, no_shard, hybrid_shard, hybrid_shard_zero2")(
      "shard-group-size",
      po::value(&in.fsdp.shard_group_size)->default_value(in.fsdp.shard_group_size),
      "hybrid: ranks per shard group (0: one node)")(
      "seq-len", po::value(&in.seq_len)->default_value(in.seq_len), "tokens per row")(
      "batch-size", po::value(&in.batch_size)->default_value(in.batch_size),
      "rows (--objective dpo: pairs) per rank per micro-batch")(
      "grad-accum", po::value(&in.grad_accum)->default_value(in.grad_accum),
      "micro-batches per optimizer step")(
      "context-parallel", po::value(&context_parallel),
      "train's --context-parallel N: ranks of one node per context group, each holding seq/N "
      "tokens of a row, --batch-size then counting rows per group (not given: 1, and when "
      "nothing fits the plan names the smallest that does)")(
      "packed", po::bool_switch(&in.packed),
      "rows hold several documents (prepare --mode packing)")(
      "objective", po::value(&objective)->default_value(objective),
      "train's --objective: sft, or dpo (two rows per pair, the head's logits recomputed in "
      "backward, and the reference model: a frozen sharded copy of the weights, or with "
      "--lora-rank the base, adapters off)")(
      "reference-logps", po::bool_switch(&in.objective.reference_logps),
      "with --objective dpo: train's --reference-logps, the reference's log-probabilities "
      "precomputed (eval --save-logps): no reference model in memory and no reference forward");
  add_checkpointing_options(d, ac_mode, ac_every);
  d.add_options()("no-sync-accumulation", po::bool_switch(&in.fsdp.no_sync_accumulation),
                  "with --grad-accum: reduce once per step")(
      "fp8", po::value(&fp8)->default_value(fp8),
      "train's --fp8: off, tensorwise or rowwise (the projections' GEMMs at the float8 rate, "
      "their casts at the memory bandwidth)")(
      "cpu-offload", po::bool_switch(&in.fsdp.cpu_offload),
      "train's --cpu-offload: master weights, AdamW state and gradients in host memory, AdamW on "
      "the CPU")("host-memory-gib", real(&host_memory_gib, host_memory_gib),
                 "with --cpu-offload: host memory per node in GiB (0: the GPU's instance's)")(
      "param-dtype", po::value(&param_dtype)->default_value(param_dtype),
      "compute and all-gather dtype: bf16 or fp32")(
      "reduce-dtype", po::value(&reduce_dtype)->default_value(reduce_dtype),
      "gradient reduction dtype: fp32 or bf16")(
      "max-inflight-gathers",
      po::value(&in.fsdp.max_inflight_gathers)->default_value(in.fsdp.max_inflight_gathers),
      "units gathered at once")("loss-chunk", po::value(&loss_chunk)->default_value(loss_chunk),
                                "train's --loss-chunk: auto, off or tokens")(
      "fabric", po::value(&fabric)->default_value(fabric),
      "p4de, p5, or a JSON file from `shardtrain preflight --json`")(
      "calibrate", po::value(&calibrate),
      "a train --metrics-file: its achieved TFLOP/s and optimizer time replace the defaults")(
      "mfu", real(&in.default_mfu, in.default_mfu), "compute efficiency without --calibrate")(
      "csv", po::value(&o.csv), "write the table as CSV here")(
      "png", po::value(&o.png), "write a chart of scaling efficiency against node count here")(
      "json", po::bool_switch(&o.json), "print the plan as JSON instead of the table")(
      "json-file", po::value(&o.json_file), "also write the JSON here");
  po::options_description hidden("Validation");
  hidden.add_options()("gpu-memory-gb", real(&gpu_memory_gb, gpu_memory_gb),
                       "override the GPU's memory (GB)")(
      "no-allowances", po::bool_switch(&no_allowances),
      "leave out the NCCL and allocator allowances (compare with measured tensor bytes)");
  po::options_description visible;
  visible.add(common_desc(o.common)).add(model_desc(m)).add(d).add(lora_desc(in.run.lora, lora));
  po::options_description all;
  all.add(visible).add(hidden);
  parse_into(args, all);
  if (o.common.wants_help()) {
    if (help_text)
      *help_text = usage_text(o.common,
                              "Usage: shardtrain plan --model llama2-70b|PRESET|config.json [--gpu "
                              "G] [--nodes 1,2,4] [options]\n"
                              "Memory per rank, fit, step time, tokens/s per GPU and scaling "
                              "efficiency per node count and strategy.",
                              o.common.help_all ? all : visible);
    return o;
  }
  if (m.spec.empty() && m.weights.empty())
    throw runtime::UsageError("--model is required: a preset such as llama2-7b, or a config.json");
  in.model = resolve(m);
  in.gpu = plan::gpu_spec(gpu);
  if (gpu_memory_gb < 0) throw runtime::UsageError("--gpu-memory-gb must be >= 0");
  if (gpu_memory_gb > 0) in.gpu.memory_bytes = gpu_memory_gb * 1e9;
  if (host_memory_gib < 0)
    throw runtime::UsageError("--host-memory-gib must be >= 0 (0: the GPU's instance's)");
  if (host_memory_gib > 0 && !in.fsdp.cpu_offload)
    throw runtime::UsageError(
        "--host-memory-gib needs --cpu-offload: without it the plan keeps no state in host memory");
  in.host_memory_bytes = host_memory_gib * 1073741824.0;
  in.allowances = !no_allowances;
  in.run.loss_chunk = parse_loss_chunk(loss_chunk);
  in.run.fp8 = model::parse_fp8_mode(fp8);
  in.fsdp.activation_checkpointing = fsdp::parse_activation_checkpointing(ac_mode, ac_every);
  in.nodes = parse_nodes(nodes);
  if (objective != "sft" && objective != "dpo")
    throw runtime::UsageError("--objective must be sft or dpo, got '" + objective + "'");
  in.objective.dpo = objective == "dpo";
  if (!context_parallel.empty()) {
    in.context_parallel_given = true;
    size_t used = 0;
    try {
      in.context_parallel = std::stoi(context_parallel, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != context_parallel.size())
      throw runtime::UsageError("--context-parallel '" + context_parallel +
                                "' must be a whole number of ranks, e.g. 8");
  }
  if (strategy == "all") {
    for (const auto& row : fsdp::kShardingNames) in.strategies.push_back(row.value);
  } else if (const auto s = runtime::parse_enum(fsdp::kShardingNames, strategy)) {
    in.strategies = {*s};
  } else {
    throw runtime::UsageError("--strategy '" + strategy + "' is unknown; use all, " +
                              runtime::enum_choices(fsdp::kShardingNames));
  }
  in.fsdp.param_dtype = parse_dtype(param_dtype, "--param-dtype");
  in.fsdp.reduce_dtype = parse_dtype(reduce_dtype, "--reduce-dtype");
  check_lora(in.run.lora, lora);
  in.validate();
  in.fabric = plan::load_fabric(fabric);
  if (!calibrate.empty()) in.calibration = plan::read_calibration(calibrate);
  check_threads(o.common);
  return o;
}

}  // namespace shardtrain::cli
