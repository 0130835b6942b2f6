// What train, eval and generate build before they run: the device for this rank, the process
// groups of the strategy (MPI on CPU, NCCL on GPUs), the weights file and the FSDP engine.
#pragma once
#include <memory>
#include <string>

#include "shardtrain/cli/commands.h"
#include "shardtrain/fsdp/engine.h"

namespace shardtrain::cli {

// The mesh of a run: the strategy's data-parallel layout with the context dimension. Pure;
// throws UsageError naming the option whose sizes do not divide.
comm::GroupLayout mesh_layout(const fsdp::ShardingConfig& cfg, int context_parallel,
                              const runtime::Topology& topo);

class EngineSetup {
 public:
  // Collective over the world: the mesh first, then the engine on it. weights: a safetensors
  // path, or "" for the seeded init. adapter_dir: a PEFT adapter to start from (run.adapters holds
  // its settings), or "" (fresh adapters).
  EngineSetup(const model::ModelConfig& model, const fsdp::ShardingConfig& cfg,
              const model::RunPlan& run, int context_parallel, runtime::MpiEnv& env,
              const std::string& weights, uint64_t seed, const std::string& adapter_dir = "");
  EngineSetup(const EngineSetup&) = delete;  // the engine refers to the groups in place
  EngineSetup& operator=(const EngineSetup&) = delete;

  comm::DeviceChoice device;
  comm::ParallelDims groups;
  std::unique_ptr<io::SafetensorsModel> weights;  // null: seeded init
  std::unique_ptr<io::SafetensorsModel> adapter;  // null: no adapter file
  std::unique_ptr<fsdp::FsdpEngine> engine;
};

}  // namespace shardtrain::cli
