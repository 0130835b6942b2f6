#include <hdf5.h>

#include <string>

#include "shardtrain/runtime/error.h"

namespace shardtrain::io {
namespace {
herr_t collect(unsigned n, const H5E_error2_t* err, void* out) {
  auto* s = static_cast<std::string*>(out);
  if (!s->empty()) s->append("; ");
  s->append(err->func_name ? err->func_name : "?");
  s->append(": ");
  s->append(err->desc ? err->desc : "(no description)");
  return n < 3 ? 0 : 1;  // the innermost few frames carry the useful detail
}
}  // namespace
}  // namespace shardtrain::io

// Declared by runtime/error.h (H5_CHECK's message); defined here, beside HDF5.
std::string shardtrain::runtime::detail::h5_error_string() {
  std::string msg;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, shardtrain::io::collect, &msg);
  H5Eclear2(H5E_DEFAULT);
  return msg.empty() ? "HDF5 call failed (empty error stack)" : msg;
}
