// A checkpoint's attributes (format, step, loader position, configs, LoRA base) on a damaged file.
#include "fuzz_util.h"
#include "shardtrain/ckpt/checkpoint_attrs.h"
#include "shardtrain/io/h5.h"

using namespace shardtrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = fuzz::scratch_path(".h5");
  fuzz::write_file(path, data, size);
  fuzz::expect_clean([&] {
    io::h5::Handle file = io::h5::open_file(path);
    const auto a = ckpt::read_attrs(file, path);
    if (a.step < 0 || a.lora_rank < 0) __builtin_trap();
  });
  // Every handle the reader opened is closed again, on success and on each error path.
  if (H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL) != 0) __builtin_trap();
  return 0;
}
