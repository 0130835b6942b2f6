// Subcommands: each takes the arguments after its name and returns the process exit code.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "shardtrain/cli/options.h"
#include "shardtrain/data/token_file.h"
#include "shardtrain/runtime/mpi_env.h"

namespace shardtrain::fsdp {
class FsdpEngine;
}

namespace shardtrain::cli {

int cmd_prepare(const std::vector<std::string>& args, runtime::MpiEnv& env);
int cmd_train(const std::vector<std::string>& args, runtime::MpiEnv& env);
int cmd_eval(const std::vector<std::string>& args, runtime::MpiEnv& env);
int cmd_generate(const std::vector<std::string>& args, runtime::MpiEnv& env);
int cmd_convert(const std::vector<std::string>& args, runtime::MpiEnv& env);
int cmd_inspect(const std::vector<std::string>& args, runtime::MpiEnv& env);
int cmd_preflight(const std::vector<std::string>& args, runtime::MpiEnv& env);
int cmd_scaling(const std::vector<std::string>& args, runtime::MpiEnv& env);
int cmd_plan(const std::vector<std::string>& args);      // runs without MPI
int cmd_tokenize(const std::vector<std::string>& args);  // runs without MPI
int cmd_report(const std::vector<std::string>& args, runtime::MpiEnv& env);

int print_help(const std::string& text, const runtime::MpiEnv& env);
// Where an export's tokenizer comes from: the --weights directory's own tokenizer files when it has
// them, else --tokenizer (a .model, a tokenizer.json or a directory). data: the token file whose
// recorded tokenizer_sha256 the exported tokenizer file must match ("" or unreadable: not checked).
struct TokenizerSource {
  std::string weights, tokenizer, data;
};
TokenizerSource train_tokenizer(const TrainOptions& o);  // --weights, --tokenizer and --data
// A checkpoint's: `tokenizer` and `base` when given, else what its run recorded (--weights, or for
// a converted checkpoint the model directory it came from; an existing --tokenizer) and its --data.
TokenizerSource checkpoint_tokenizer(const std::string& path, const std::string& tokenizer,
                                     const std::string& base);
// Throws UsageError when the tokenizer the export would carry is not the one the token file was
// prepared with (naming both), or a --tokenizer is no tokenizer that fits the vocabulary: train
// checks before its first step, convert before it loads.
void check_export_tokenizer(const TokenizerSource& src, const model::ModelConfig& model);
// Throws UsageError when the --weights directory has tokenizer files and the --tokenizer that
// encodes prompts (generate, the exact-match task) is none of them (same sha256).
void check_prompt_tokenizer(const std::string& weights, const std::string& tokenizer);
// Rank 0, into an export directory: the tokenizer files (copied unchanged from --weights; or
// --tokenizer's tokenizer.json or tokenizer.model with the tokenizer_config.json,
// special_tokens_map.json and chat template beside it, a bare tokenizer.model getting those of a
// Llama-2 LlamaTokenizer) and, for a full model, generation_config.json. With no source the export
// stands and one warning line says how to add one.
void write_tokenizer_files(const std::string& dir, const TokenizerSource& src,
                           const model::ModelConfig& model, bool full_model);
// Collective: every rank gathers the full parameters; rank 0 writes Hugging Face safetensors
// (5 GiB shards), config.json with torch_dtype and the tokenizer files into dir. A LoRA engine's
// adapters are merged into the weights (W + alpha/r B A), as PEFT's merge_and_unload.
void export_hf(const std::string& dir, const model::ModelConfig& model, fsdp::FsdpEngine& engine,
               at::ScalarType dtype, int rank, const TokenizerSource& tokenizer);
// Collective: a LoRA engine's adapters as PEFT saves them: adapter_model.safetensors (fp32) and
// adapter_config.json, which peft.PeftModel.from_pretrained loads, with the tokenizer files.
// base: recorded as the base path.
void export_peft(const std::string& dir, fsdp::FsdpEngine& engine, const std::string& base,
                 int rank, const TokenizerSource& tokenizer);
// full[W] = W + alpha/r B A for every targeted projection (pure; fp32 host tensors by name).
void merge_adapters(std::map<std::string, at::Tensor>& full,
                    const std::map<std::string, at::Tensor>& adapters,
                    const model::ModelConfig& model, const model::LoraConfig& lora);

// One CUDA device per rank, picked by the rank's place among the ranks on its machine (never the
// simulated nodes of --ranks-per-node) among the visible GPUs (CUDA_VISIBLE_DEVICES applies), for
// --device auto|cuda; cpu otherwise. Selects the device. Throws UsageError for --device cuda on a
// node without GPUs, and for more ranks on a machine than it has visible GPUs.
struct DeviceChoice {
  bool cuda = false;
  int index = -1;
  std::string name = "cpu";  // the GPU's name, for the FLOP/s peak table
};
DeviceChoice choose_device(const std::string& spec, const runtime::MpiEnv& env);
// Pure: the GPU of the rank that is machine_local_rank of the machine_local_size ranks sharing
// `host` (MPI_COMM_TYPE_SHARED), so no two ranks of a machine share one. Throws UsageError naming
// the host, its ranks and its GPUs when it has more ranks than visible GPUs.
int gpu_for_rank(int machine_local_rank, int machine_local_size, int visible_gpus,
                 const std::string& host);

// Sets LibTorch's intra-op pool: 0 means this rank's share of the machine's cores.
void setup_threads(int threads, const runtime::MpiEnv& env);

}  // namespace shardtrain::cli
