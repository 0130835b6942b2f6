// A checkpoint's root attributes: everything in the file but the tensors. One writer and one
// checked reader, so a hand-made or damaged file fails with a line naming it, never a crash.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "shardtrain/data/loader.h"

namespace shardtrain::ckpt {

struct CheckpointAttrs {
  int64_t format_version = 0;
  int64_t step = 0, adam_step = 0, world_size = 1;
  LoaderState loader;
  std::string sharding;
  nlohmann::json run_config, model_config;
  // LoRA (lora_rank > 0): the adapters' settings and the base they were trained on.
  int64_t lora_rank = 0;
  double lora_alpha = 0, lora_dropout = 0;
  std::string lora_targets, base_weights;
  int64_t base_crc32 = -1;
};

void write_attrs(hid_t file, const CheckpointAttrs& a);
// Throws UsageError for a file that is not a shardtrain checkpoint or is of a newer format, and
// Error naming the file and attribute for a missing or malformed one.
CheckpointAttrs read_attrs(hid_t file, const std::string& path);
// The same from a path, serially (no MPI): for what a command needs before it builds anything.
CheckpointAttrs read_attrs(const std::string& path);

}  // namespace shardtrain::ckpt
