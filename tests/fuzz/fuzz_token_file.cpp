// The token-file reader (`prepare`'s HDF5 output) on a damaged file: open, attributes, rows.
#include "fuzz_util.h"
#include "shardtrain/data/token_file.h"

using namespace shardtrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = fuzz::scratch_path(".h5");
  fuzz::write_file(path, data, size);
  fuzz::expect_clean([&] {
    data::TokenFile f(path);
    if (f.rows() <= 0 || f.seq_len() < 0) __builtin_trap();
    const model::Batch b = f.read({0, f.rows() - 1});
    if (b.tokens.size(0) != 2 || b.tokens.size(1) != f.seq_len()) __builtin_trap();
  });
  // Every handle the reader opened is closed again, on success and on each error path.
  if (H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL) != 0) __builtin_trap();
  return 0;
}
