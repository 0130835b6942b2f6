// An HDF5 identifier owned by one object (RAII, move-only), and the library-wide lock and error
// settings every caller of HDF5 shares.
#pragma once
#include <hdf5.h>

#include <mutex>

namespace shardtrain::io::h5 {

// HDF5 here is not built thread-safe; every thread that calls it holds this lock.
std::recursive_mutex& library_lock();
// Silences HDF5's automatic stack printing once; H5_CHECK reports the stack itself.
void quiet_errors();

class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer close) : id_(id), close_(close) {}
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = H5I_INVALID_HID; }
  Handle& operator=(Handle&& o) noexcept {
    if (this == &o) return *this;
    reset();
    id_ = o.id_;
    close_ = o.close_;
    o.id_ = H5I_INVALID_HID;
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  operator hid_t() const { return id_; }
  bool valid() const { return id_ != H5I_INVALID_HID; }
  void reset();

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer close_ = nullptr;
};

}  // namespace shardtrain::io::h5
