#include "shardtrain/ckpt/checkpoint_attrs.h"

#include <mutex>
#include <sstream>
#include <vector>

#include "shardtrain/io/h5.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::ckpt {
namespace {

herr_t collect_name(hid_t, const char* name, const H5A_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->push_back(name);
  return 0;
}

// One attribute into `values` by its HDF5 type class; what cannot be read is recorded, not thrown,
// so that only a state that needs it fails.
void read_one(hid_t file, const std::string& path, const std::string& name, Values& values) {
  io::h5::Handle attr(H5_CHECK(H5Aopen(file, name.c_str(), H5P_DEFAULT)), H5Aclose);
  io::h5::Handle space(H5_CHECK(H5Aget_space(attr)), H5Sclose);
  if (H5_CHECK(H5Sget_simple_extent_npoints(space)) != 1) {
    values.set_unreadable(name,
                          path + ": attribute " + name +
                              " is not a single value; the file is not what shardtrain wrote");
    return;
  }
  io::h5::Handle type(H5_CHECK(H5Aget_type(attr)), H5Tclose);
  const H5T_class_t cls = H5Tget_class(type);
  if (cls == H5T_INTEGER)
    values.set_int(name, io::h5::read_attr_int(file, name));
  else if (cls == H5T_FLOAT)
    values.set_real(name, io::h5::read_attr_double(file, name));
  else if (cls == H5T_STRING)
    values.set_text(name, io::h5::read_attr_string(file, name));
  else
    values.set_unreadable(name,
                          path + ": attribute " + name + " has a type shardtrain does not write");
}

}  // namespace

void write_values(hid_t file, const Values& values) {
  if (values.has(attr::kFormatVersion))
    throw runtime::Error("checkpoint state may not save an attribute named format_version");
  io::h5::write_attr(file, attr::kFormatVersion, kFormatVersion);
  for (const auto& [key, v] : values.entries()) {
    if (const auto* i = std::get_if<int64_t>(&v))
      io::h5::write_attr(file, key, *i);
    else if (const auto* d = std::get_if<double>(&v))
      io::h5::write_attr_double(file, key, *d);
    else
      io::h5::write_attr(file, key, std::get<std::string>(v));
  }
}

Values read_values(hid_t file, const std::string& path) {
  if (!io::h5::has_attr(file, attr::kFormatVersion))
    throw runtime::UsageError(path + " is not a shardtrain checkpoint");
  const int64_t version = io::h5::read_attr_int(file, attr::kFormatVersion);
  if (version > kFormatVersion)
    throw runtime::UsageError(path + " has checkpoint format " + std::to_string(version) +
                              ", newer than this build's " + std::to_string(kFormatVersion) +
                              "; upgrade shardtrain");
  std::vector<std::string> names;
  hsize_t idx = 0;
  H5_CHECK(H5Aiterate2(file, H5_INDEX_NAME, H5_ITER_INC, &idx, collect_name, &names));
  Values values;
  for (const auto& name : names) read_one(file, path, name, values);
  return values.about(path, "");
}

CheckpointAttrs read_attrs(hid_t file, const std::string& path) {
  const Values v = read_values(file, path);
  CheckpointAttrs a;
  a.format_version = v.get_int(attr::kFormatVersion);
  a.step = v.get_int(attr::kStep);
  a.loader_in_steps = !v.has(attr::kLoaderRow);
  a.loader = {v.get_int(attr::kLoaderEpoch),
              v.get_int(a.loader_in_steps ? attr::kLoaderStep : attr::kLoaderRow)};
  if (v.has(attr::kGlobalBatch)) a.global_batch = v.get_int(attr::kGlobalBatch);
  if (v.has(attr::kScheduleBatch)) a.schedule_batch = v.get_int(attr::kScheduleBatch);
  a.adam_step = v.get_int(attr::kAdamStep);
  if (v.has(attr::kWorldSize)) a.world_size = v.get_int(attr::kWorldSize);
  if (v.has(attr::kSharding)) a.sharding = v.get_text(attr::kSharding);
  a.run_config = v.get_json(attr::kRunConfig);
  a.model_config = v.get_json(attr::kModelConfig);
  if (v.has(attr::kLoraRank)) a.lora_rank = v.get_int(attr::kLoraRank);
  if (a.lora_rank > 0) {
    a.lora_alpha = v.get_real(attr::kLoraAlpha);
    a.lora_dropout = v.get_real(attr::kLoraDropout);
    a.lora_targets = v.get_text(attr::kLoraTargets);
    a.base_weights = v.get_text(attr::kBaseWeights);
    a.base_crc32 = v.get_int(attr::kBaseCrc32);
  }
  if (a.step < 0 || a.adam_step < 0 || a.loader.epoch < 0 || a.loader.row < 0 || a.lora_rank < 0)
    throw runtime::Error(
        path + ": negative step, loader position or lora_rank; the checkpoint is damaged");
  return a;
}

model::LoraConfig CheckpointAttrs::adapters() const {
  model::LoraConfig l;
  if (lora_rank == 0) return l;
  l.rank = lora_rank;
  l.alpha = lora_alpha;
  l.dropout = lora_dropout;
  l.targets = model::parse_lora_targets(lora_targets);
  return l;
}

void put_adapters(Values& out, const model::LoraConfig& l) {
  if (!l.enabled()) return;
  out.set_int(attr::kLoraRank, l.rank);
  out.set_real(attr::kLoraAlpha, l.alpha);
  out.set_real(attr::kLoraDropout, l.dropout);
  out.set_text(attr::kLoraTargets, model::join_lora_targets(l.targets));
}

nlohmann::json adapter_params(const model::LoraConfig& l) {
  if (!l.enabled()) return nlohmann::json::object();
  return {{attr::kLoraRank, l.rank},
          {attr::kLoraAlpha, l.alpha},
          {attr::kLoraDropout, l.dropout},
          {attr::kLoraTargets, model::join_lora_targets(l.targets)}};
}

std::string adapters_line(const CheckpointAttrs& a) {
  if (a.lora_rank == 0) return "";
  std::ostringstream os;
  os << "lora rank " << a.lora_rank << ", alpha " << a.lora_alpha << ", dropout " << a.lora_dropout
     << ", targets " << a.lora_targets << " | base " << a.base_weights << " (CRC-32 "
     << a.base_crc32 << ")";
  return os.str();
}

CheckpointAttrs read_attrs(const std::string& path) {
  std::lock_guard<std::recursive_mutex> lock(io::h5::library_lock());
  io::h5::Handle f = io::h5::open_file(path);
  return read_attrs(f, path);
}

}  // namespace shardtrain::ckpt
