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
  AdapterArgs adapters;
  spec::SpecArgs raw;
  std::string gpu = "h100-80gb", fabric = "p5", nodes = "1,2,4,8,16,32,64", strategy = "all",
              calibrate, objective = "sft", reference_logps;
  int context_parallel = 1;
  std::vector<std::string> given;  // options typed or read from --config, not defaulted
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
      "seq-len", po::value(&in.seq_len)->default_value(in.seq_len), "tokens per row")(
      "packed", po::bool_switch(&in.packed),
      "rows hold several documents (prepare --mode packing)");
  // train's options, as train declares them (spec/spec_options.h).
  spec::add_batch_options(d, in.batch_size, in.grad_accum);
  spec::add_objective_options(d, objective, reference_logps);
  spec::add_layout_options(d, in.fsdp, context_parallel, raw, /*training=*/true);
  d.add_options()("host-memory-gib", real(&host_memory_gib, host_memory_gib),
                  "with --cpu-offload: host memory per node in GiB (0: the GPU's instance's)")(
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
  visible.add(common_desc(o.common))
      .add(model_desc(m))
      .add(d)
      .add(adapter_desc(in.run.adapters, adapters));
  po::options_description all;
  all.add(visible).add(hidden);
  parse_into(args, all, nullptr, nullptr, &given);
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
  in.nodes = parse_nodes(nodes);
  in.objective.dpo = spec::resolve_objective(objective);
  in.objective.reference_logps = !reference_logps.empty();
  // Not given: the plan names the smallest that fits.
  in.context_parallel_given =
      std::find(given.begin(), given.end(), "context-parallel") != given.end();
  in.context_parallel = context_parallel;
  if (strategy == "all") {
    for (const auto& row : fsdp::kShardingNames) in.strategies.push_back(row.value);
  } else if (const auto s = runtime::parse_enum(fsdp::kShardingNames, strategy)) {
    in.strategies = {*s};
  } else {
    throw runtime::UsageError("--strategy '" + strategy + "' is unknown; use all, " +
                              runtime::enum_choices(fsdp::kShardingNames));
  }
  spec::resolve_layout(in.fsdp, in.run, raw, /*training=*/true);
  // A plan is for GPUs: --param-dtype auto is bf16 there.
  if (in.fsdp.param_dtype == at::ScalarType::Undefined) in.fsdp.param_dtype = at::kBFloat16;
  check_adapters(in.run.adapters, adapters);
  spec::TrainSpec run{in.fsdp,       in.run,           in.context_parallel, in.batch_size,
                      in.grad_accum, in.objective.dpo, reference_logps};
  spec::validate(run, in.model, in.packed);
  in.validate();
  in.fabric = plan::load_fabric(fabric);
  if (!calibrate.empty()) in.calibration = plan::read_calibration(calibrate);
  check_threads(o.common);
  return o;
}

}  // namespace shardtrain::cli
