#include "shardtrain/io/h5_handle.h"

namespace shardtrain::io::h5 {

std::recursive_mutex& library_lock() {
  static std::recursive_mutex m;
  return m;
}

void quiet_errors() {
  static std::once_flag once;
  std::call_once(once, [] { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); });
}

void Handle::reset() {
  if (id_ >= 0 && close_) close_(id_);
  id_ = H5I_INVALID_HID;
}

}  // namespace shardtrain::io::h5
