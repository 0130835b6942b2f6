#include <hdf5.h>

#include <string>

#include "shardtrain/runtime/error.h"

namespace shardtrain::io {
namespace {
struct Collected {
  std::string text;
  std::string
      os_error;  // the file driver's frame, which alone says "errno = 28, error message = ..."
};

herr_t collect(unsigned n, const H5E_error2_t* err, void* out) {
  auto* c = static_cast<Collected*>(out);
  const std::string desc = err->desc ? err->desc : "(no description)";
  if (n < 4) {  // the outermost few frames say what was being done
    if (!c->text.empty()) c->text.append("; ");
    c->text.append(err->func_name ? err->func_name : "?").append(": ").append(desc);
    if (desc.find("errno = ") != std::string::npos) c->os_error = "-";  // already in the text
  } else if (c->os_error.empty() && desc.find("errno = ") != std::string::npos) {
    c->os_error = desc;  // a full disk or quota is told only here: runtime::storage_errno reads it
  }
  return 0;
}
}  // namespace
}  // namespace shardtrain::io

// Declared by runtime/error.h (H5_CHECK's message); defined here, beside HDF5.
std::string shardtrain::runtime::detail::h5_error_string() {
  shardtrain::io::Collected c;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, shardtrain::io::collect, &c);
  H5Eclear2(H5E_DEFAULT);
  if (c.text.empty()) return "HDF5 call failed (empty error stack)";
  return c.os_error.empty() || c.os_error == "-" ? c.text : c.text + "; " + c.os_error;
}
