// Sharded checkpoints as one HDF5 file (docs/checkpoint-format.md): every parameter and its
// AdamW state as a dataset in logical shape, written in parallel with collective MPI-IO by one
// replica's ranks, each writing only its own slices; read back at any world size and strategy.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "shardtrain/ckpt/checkpoint_dir.h"
#include "shardtrain/data/loader.h"
#include "shardtrain/fsdp/engine.h"
#include "shardtrain/optim/optimizer.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::ckpt {

constexpr int64_t kFormatVersion = 1;

// The HDF5 groups of a checkpoint, each holding one dataset per parameter: the fp32 master
// weights, then AdamW's first and second moments.
inline constexpr const char* kGroups[3] = {"model", "exp_avg", "exp_avg_sq"};

// CRC-32 (zlib's) of a tensor's bytes, as the "crc32" attribute of each dataset stores it: the
// tensor is made contiguous on the CPU first, and any size is fine (zlib gets it in 1 GiB pieces).
uint32_t crc_of(const at::Tensor& t);

// A piece of one parameter held by this rank with its optimizer state: what a checkpoint
// writes and reads. The tensors are views into the live shards, or host copies.
struct StatePiece {
  std::string name;
  std::vector<int64_t> shape;              // the parameter's logical shape
  int64_t param_offset = 0, numel = 0;     // flat range of the parameter
  at::Tensor master, exp_avg, exp_avg_sq;  // [numel] fp32
};
// The engine's pieces beside the optimizer's state for them (make_optimizer's slot order).
std::vector<StatePiece> state_pieces(fsdp::FsdpEngine& engine, Optimizer& optimizer);

struct TrainState {
  int64_t step = 0;  // optimizer steps done
  LoaderState loader;
  nlohmann::json run_config, model_config;
  // LoRA: the frozen base the adapters were trained on (its --weights path, "" for the seeded
  // init) and base_crc32() of it; a resume on another base is refused.
  std::string base_weights;
  int64_t base_crc32 = -1;
};

// Collective over the shard group: the CRC-32 of every base parameter's fp32 bytes, in Hugging
// Face order, as the engine read them (the same at any world size, strategy and --param-dtype).
int64_t base_crc32(fsdp::FsdpEngine& engine);

// A resume that must not fall back to an older checkpoint (--resume auto skips unreadable
// ones): the run's LoRA settings or base weights differ from the checkpoint's.
class ResumeRefused : public AgreedUsageError {
 public:
  using AgreedUsageError::AgreedUsageError;
};

// Lustre layout of new checkpoint files, passed as MPI-IO hints (striping_factor/_unit); the
// stripe size is also the HDF5 alignment of large datasets. 0: the file system's default.
struct StripeOptions {
  int count = 0;
  int64_t size = 0;  // bytes
};

// What a save writes, taken from the engine: views of the live shards, or host copies that an
// asynchronous save can write while training goes on.
struct Snapshot {
  std::vector<StatePiece> pieces;
  std::vector<ParamSpec> specs;  // the datasets: the model's parameters, or a LoRA run's adapters
  LoraConfig lora;               // rank 0: not a LoRA run
  ModelConfig model;
  TrainState state;
  int64_t adam_step = 0;
  int world_size = 1, shard_rank = 0;
  std::string sharding;
  bool writer = false;  // this rank belongs to the replica that writes
};
Snapshot snapshot(fsdp::FsdpEngine& engine, Optimizer& optimizer, const TrainState& state, bool copy);
// Collective over `comm` (every rank of the world, in any communicator that spans it).
void write(const std::string& path, MPI_Comm comm, const Snapshot& snap, const StripeOptions& stripe = {});

// Collective over `comm`: writes final_path + ".tmp", then rank 0 publishes it (below).
void write_and_publish(const std::string& final_path, MPI_Comm comm, const Snapshot& snap, const StripeOptions& stripe,
                       int keep);
// Collective over the world: a synchronous write_and_publish of the engine's live shards.
void save(const std::string& final_path, fsdp::FsdpEngine& engine, Optimizer& optimizer, const TrainState& state,
          const StripeOptions& stripe = {}, int keep = 0);
// Collective over the world: fills this rank's shards and the optimizer state, verifies every
// dataset's CRC-32 across the shard group, and returns the training state. Errors name the
// tensor and the file.
TrainState load(const std::string& path, fsdp::FsdpEngine& engine, Optimizer& optimizer);

}  // namespace shardtrain::ckpt
