#include "shardtrain/ckpt/checkpoint_attrs.h"

#include "shardtrain/ckpt/checkpoint.h"
#include "shardtrain/io/h5.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::ckpt {

void write_attrs(hid_t file, const CheckpointAttrs& a) {
  h5::write_attr(file, "format_version", a.format_version);
  h5::write_attr(file, "step", a.step);
  h5::write_attr(file, "loader_epoch", a.loader.epoch);
  h5::write_attr(file, "loader_step", a.loader.step);
  h5::write_attr(file, "adam_step", a.adam_step);
  h5::write_attr(file, "world_size", a.world_size);
  h5::write_attr(file, "sharding", a.sharding);
  h5::write_attr(file, "run_config", a.run_config.dump());
  h5::write_attr(file, "model_config", a.model_config.dump());
  if (a.lora_rank > 0) {
    h5::write_attr(file, "lora_rank", a.lora_rank);
    h5::write_attr_double(file, "lora_alpha", a.lora_alpha);
    h5::write_attr_double(file, "lora_dropout", a.lora_dropout);
    h5::write_attr(file, "lora_targets", a.lora_targets);
    h5::write_attr(file, "base_weights", a.base_weights);
    h5::write_attr(file, "base_crc32", a.base_crc32);
  }
}

CheckpointAttrs read_attrs(hid_t file, const std::string& path) {
  if (!h5::has_attr(file, "format_version")) throw UsageError(path + " is not a shardtrain checkpoint");
  CheckpointAttrs a;
  a.format_version = h5::read_attr_int(file, "format_version");
  if (a.format_version > kFormatVersion)
    throw UsageError(path + " has checkpoint format " + std::to_string(a.format_version) + ", newer than this build's " +
                     std::to_string(kFormatVersion) + "; upgrade shardtrain");
  auto json_attr = [&](const char* name) {
    try {
      return nlohmann::json::parse(h5::read_attr_string(file, name));
    } catch (const nlohmann::json::exception& e) {
      throw Error(path + ": attribute " + name + " is not valid JSON (" + e.what() + "); the checkpoint is damaged");
    }
  };
  a.step = h5::read_attr_int(file, "step");
  a.loader = {h5::read_attr_int(file, "loader_epoch"), h5::read_attr_int(file, "loader_step")};
  a.adam_step = h5::read_attr_int(file, "adam_step");
  if (h5::has_attr(file, "world_size")) a.world_size = h5::read_attr_int(file, "world_size");
  if (h5::has_attr(file, "sharding")) a.sharding = h5::read_attr_string(file, "sharding");
  a.run_config = json_attr("run_config");
  a.model_config = json_attr("model_config");
  if (h5::has_attr(file, "lora_rank")) a.lora_rank = h5::read_attr_int(file, "lora_rank");
  if (a.lora_rank > 0) {
    a.lora_alpha = h5::read_attr_double(file, "lora_alpha");
    a.lora_dropout = h5::read_attr_double(file, "lora_dropout");
    a.lora_targets = h5::read_attr_string(file, "lora_targets");
    a.base_weights = h5::read_attr_string(file, "base_weights");
    a.base_crc32 = h5::read_attr_int(file, "base_crc32");
  }
  if (a.step < 0 || a.adam_step < 0 || a.loader.epoch < 0 || a.loader.step < 0 || a.lora_rank < 0)
    throw Error(path + ": negative step, loader position or lora_rank; the checkpoint is damaged");
  return a;
}

CheckpointAttrs read_attrs(const std::string& path) {
  std::lock_guard<std::recursive_mutex> lock(h5::library_lock());
  h5::Handle f = h5::open_file(path);
  return read_attrs(f, path);
}

}  // namespace shardtrain::ckpt
