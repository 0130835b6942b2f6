// `shardtrain inspect CKPT`: what a checkpoint holds, and whether every dataset's bytes still
// match its CRC-32. Reads serially; run it without mpirun.
#include <ATen/ATen.h>

#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "shardtrain/ckpt/checkpoint.h"
#include "shardtrain/ckpt/checkpoint_attrs.h"
#include "shardtrain/cli/commands.h"
#include "shardtrain/cli/run_checks.h"
#include "shardtrain/io/h5.h"
#include "shardtrain/io/h5_types.h"
#include "shardtrain/runtime/counted.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::cli {
namespace {

struct Row {
  std::string name, shape, status;
};

#if H5_VERSION_GE(1, 12, 0)
using LinkInfo = H5L_info2_t;
#else
using LinkInfo = H5L_info_t;  // Debian 12 ships HDF5 1.10
#endif

herr_t collect(hid_t, const char* name, const LinkInfo*, void* out) {
  static_cast<std::vector<std::string>*>(out)->push_back(name);
  return 0;
}

std::vector<std::string> children(hid_t parent, const std::string& path) {
  std::vector<std::string> names;
  io::h5::Handle g(H5_CHECK(H5Gopen2(parent, path.c_str(), H5P_DEFAULT)), H5Gclose);
  H5_CHECK(H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, nullptr, collect, &names));
  return names;
}

Row check(hid_t file, const std::string& path) {
  io::h5::Handle d = io::h5::open_dataset(file, path);
  const auto dims = io::h5::dataset_shape(d);
  std::ostringstream shape;
  shape << "[";
  hsize_t n = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    shape << (i ? ", " : "") << dims[i];
    n *= dims[i];
  }
  shape << "]";
  // HDF5 would convert any other type to float and the CRC would merely fail: name the type
  // instead.
  const io::h5::Expected any_f32{io::h5::Element::kFloat32, std::vector<int64_t>(dims.size(), -1),
                                 ""};
  if (!io::h5::dataset_mismatch(d, "", path, any_f32).empty()) {
    io::h5::Handle type(H5_CHECK(H5Dget_type(d)), H5Tclose);
    return {path, shape.str(), "NOT float32 but " + io::h5::type_name(type)};
  }
  std::vector<float> buf(n);
  H5_CHECK(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()));
  const uint32_t crc =
      ckpt::crc_of(at::from_blob(buf.data(), {static_cast<int64_t>(n)}, at::kFloat));
  const bool has = io::h5::has_attr(d, "crc32");
  const bool ok = has && io::h5::read_attr_int(d, "crc32") == static_cast<int64_t>(crc);
  return {path, shape.str(), !has ? "no checksum" : ok ? "ok" : "CORRUPT"};
}

}  // namespace

int cmd_inspect(const std::vector<std::string>& args, runtime::MpiEnv& env) {
  std::string help;
  InspectOptions o = runtime::parse_on_every_rank([&] { return parse_inspect(args, &help); });
  if (o.common.wants_help()) return print_help(help, env);
  if (env.rank() != 0) return 0;
  std::lock_guard<std::recursive_mutex> lock(io::h5::library_lock());
  io::h5::Handle f = io::h5::open_file(o.checkpoint);
  const ckpt::CheckpointAttrs a =
      ckpt::read_attrs(f, o.checkpoint);  // refuses a foreign or newer file
  std::cout << o.checkpoint << "\n  format " << a.format_version << " | step " << a.step
            << " | loader epoch " << a.loader.epoch << (a.loader_in_steps ? " step " : " row ")
            << a.loader.row << " | adam step " << a.adam_step << "\n  saved by "
            << runtime::counted(a.world_size, "rank") << ", " << a.sharding;
  // A DPO run (its reference recorded) counts its batch in pairs, as --batch-size did.
  const char* unit = a.run_config.contains("reference") ? "pair" : "row";
  if (a.global_batch > 0)
    std::cout << ", global batch " << runtime::counted(a.global_batch, unit)
              << " (schedule in steps of " << runtime::counted(a.schedule_batch, unit) << ")";
  std::cout << "\n  model " << a.model_config.dump() << "\n  run " << a.run_config.dump() << "\n";
  if (a.lora_rank > 0)  // a LoRA run: the datasets are its adapters
    std::cout << "  lora rank " << a.lora_rank << ", alpha " << a.lora_alpha << ", dropout "
              << a.lora_dropout << ", targets " << a.lora_targets << " | base " << a.base_weights
              << " (CRC-32 " << a.base_crc32 << ")\n";
  int bad = 0, total = 0;
  for (const std::string& group :
       children(f, "/"))  // every piece's tensors, whichever registered them
    for (const auto& name : children(f, group)) {
      const Row r = check(f, std::string("/") + group + "/" + name);
      bad += r.status != "ok";
      ++total;
      std::cout << "  " << std::left << std::setw(58) << r.name << std::setw(14) << r.shape
                << "float32  " << r.status << "\n";
    }
  std::cout << total << " datasets, "
            << (bad ? std::to_string(bad) + " FAILED their checksum" : "all checksums ok")
            << std::endl;
  return bad ? 1 : 0;
}

}  // namespace shardtrain::cli
