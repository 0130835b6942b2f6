// The options of a run that more than one command takes, each declared once: the sharding and
// precision options (train, eval, generate and plan), the batch (train and plan) and the
// objective (train, eval and plan). Each binds to the command's own storage, whose values are the
// defaults --help shows; resolve() parses the text forms.
#pragma once
#include <ATen/core/ScalarType.h>

#include <boost/program_options.hpp>
#include <cstdint>
#include <string>

#include "shardtrain/spec/train_spec.h"

namespace shardtrain::spec {

namespace po = boost::program_options;

// The options typed as text, parsed by resolve().
struct SpecArgs {
  std::string param_dtype = "auto", loss_chunk = "auto", fp8 = "off";
  std::string reduce_dtype;  // add_layout_options sets it from ShardingConfig's default
  std::string activation_checkpointing = "none";
  int64_t ac_every = 1;
  bool no_fp8_all_gather = false;
};

// Sharding and precision: --shard-group-size, --context-parallel, --param-dtype,
// --max-inflight-gathers; training adds --reduce-dtype, --no-sync-accumulation, --cpu-offload,
// --fp8, --no-fp8-all-gather, --loss-chunk and activation checkpointing.
void add_layout_options(po::options_description& d, fsdp::ShardingConfig& f, int& context_parallel,
                        SpecArgs& raw, bool training);
// --batch-size and --grad-accum.
void add_batch_options(po::options_description& d, int64_t& batch_size, int64_t& grad_accum);
// --objective (sft or dpo) and --reference-logps.
void add_objective_options(po::options_description& d, std::string& objective,
                           std::string& reference_logps);

// raw's values into f and run (training: the training options too); throws UsageError naming the
// option.
void resolve_layout(fsdp::ShardingConfig& f, model::RunPlan& run, const SpecArgs& raw,
                    bool training);
bool resolve_objective(const std::string& objective);  // dpo; throws UsageError

// fp32 or bf16 (float32, bfloat16); throws UsageError naming opt.
at::ScalarType parse_dtype(const std::string& s, const char* opt);
const char* dtype_name(at::ScalarType t);        // parse_dtype's inverse: fp32, bf16 or auto
int64_t parse_loss_chunk(const std::string& v);  // auto 0, off -1, N; throws UsageError

}  // namespace shardtrain::spec
