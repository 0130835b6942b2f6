// What train, eval and generate build before they run: the device for this rank, the process
// groups of the strategy (MPI on CPU, NCCL on GPUs), the weights file and the FSDP engine.
#pragma once
#include <memory>
#include <string>

#include "shardtrain/cli/commands.h"
#include "shardtrain/fsdp/engine.h"

namespace shardtrain::cli {

class EngineSetup {
 public:
  // Collective over the world. weights: a safetensors path, or "" for the seeded init. lora_dir:
  // a PEFT adapter to start from (cfg.lora holds its settings), or "" (a LoRA run's fresh init).
  EngineSetup(const model::ModelConfig& model, const fsdp::FsdpConfig& cfg, runtime::MpiEnv& env,
              const std::string& weights, uint64_t seed, const std::string& lora_dir = "");
  EngineSetup(const EngineSetup&) = delete;  // the engine refers to the groups in place
  EngineSetup& operator=(const EngineSetup&) = delete;

  DeviceChoice device;
  comm::ProcessGroups groups;
  std::unique_ptr<io::SafetensorsModel> weights;  // null: seeded init
  std::unique_ptr<io::SafetensorsModel> adapter;  // null: no adapter file
  std::unique_ptr<fsdp::FsdpEngine> engine;
};

}  // namespace shardtrain::cli
