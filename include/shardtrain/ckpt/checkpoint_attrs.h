// A checkpoint's root attributes: everything in the file but the tensors. The format writes
// format_version and every state's Values; a reader takes them all back with one checked pass,
// so a hand-made or damaged file fails with a line naming it, never a crash.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "shardtrain/ckpt/values.h"
#include "shardtrain/data/loader.h"
#include "shardtrain/model/lora.h"

namespace shardtrain::ckpt {

// Bump only when a reader of the previous version would misread a new file; readers accept
// every version up to their own.
constexpr int64_t kFormatVersion = 1;

// The root attributes' names: what the states write (training_state.cpp) and what
// read_attrs reads back, in one place.
namespace attr {
inline constexpr const char* kFormatVersion = "format_version";
inline constexpr const char* kWorldSize = "world_size";
inline constexpr const char* kSharding = "sharding";
inline constexpr const char* kModelConfig = "model_config";
inline constexpr const char* kAdamStep = "adam_step";
inline constexpr const char* kStep = "step";
inline constexpr const char* kLoaderEpoch = "loader_epoch";
inline constexpr const char* kLoaderStep =
    "loader_step";  // files before loader_row: the step in the epoch
inline constexpr const char* kLoaderRow = "loader_row";
inline constexpr const char* kGlobalBatch = "global_batch";
inline constexpr const char* kScheduleBatch = "schedule_batch";
inline constexpr const char* kScheduleSteps = "schedule_steps";
inline constexpr const char* kDataSeed = "data_seed";
inline constexpr const char* kDataFile = "data_file";
inline constexpr const char* kDataRows = "data_rows";
inline constexpr const char* kRunConfig = "run_config";
inline constexpr const char* kLoraRank = "lora_rank";
inline constexpr const char* kLoraAlpha = "lora_alpha";
inline constexpr const char* kLoraDropout = "lora_dropout";
inline constexpr const char* kLoraTargets = "lora_targets";
inline constexpr const char* kBaseWeights = "base_weights";
inline constexpr const char* kBaseCrc32 = "base_crc32";
}  // namespace attr

// format_version, then every value; throws Error for a value named format_version.
void write_values(hid_t file, const Values& values);
// Every root attribute. Throws UsageError for a file that is not a shardtrain checkpoint or is of
// a newer format; an attribute that is not a single value reads as an error for whoever asks for
// it.
Values read_values(hid_t file, const std::string& path);

// What commands need to know of a checkpoint before they build anything: the training's
// attributes as one struct.
struct CheckpointAttrs {
  int64_t format_version = 0;
  int64_t step = 0;
  int64_t adam_step = 0;
  int64_t world_size = 1;
  data::LoaderState loader;      // epoch and rows consumed in it
  bool loader_in_steps = false;  // an older file: loader.row holds the step in the epoch
  int64_t global_batch = 0;      // the saver's (0: not recorded)
  int64_t schedule_batch = 0;    // the global batch the schedule counts steps of (0: not recorded)
  std::string sharding;
  nlohmann::json run_config, model_config;
  // LoRA (lora_rank > 0): the adapters' settings and the base they were trained on.
  int64_t lora_rank = 0;
  double lora_alpha = 0;
  double lora_dropout = 0;
  std::string lora_targets, base_weights;
  int64_t base_crc32 = -1;
  // The adapters' settings it records (rank 0: a full fine-tune's).
  model::LoraConfig adapters() const;
};

// A run's adapter settings under the names a checkpoint records them by (nothing when off); a
// run's reported parameters (trackers' hyperparameters) take the same names.
void put_adapters(Values& out, const model::LoraConfig& l);
nlohmann::json adapter_params(const model::LoraConfig& l);
// inspect's line for a checkpoint with adapters ("lora rank 4, alpha 16, dropout 0, targets
// q_proj,v_proj | base W (CRC-32 N)"); "" for a full fine-tune's.
std::string adapters_line(const CheckpointAttrs& a);

// Throws UsageError as read_values does, and Error naming the file and attribute for a missing
// or malformed one.
CheckpointAttrs read_attrs(hid_t file, const std::string& path);
// The same from a path, serially (no MPI).
CheckpointAttrs read_attrs(const std::string& path);

}  // namespace shardtrain::ckpt
