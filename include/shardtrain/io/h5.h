// Move-only RAII handles and small helpers over the HDF5 C API: files, datasets, dataspaces,
// attributes. Every call goes through H5_CHECK, so failures carry HDF5's own message.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

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
    if (this != &o) reset(), id_ = o.id_, close_ = o.close_, o.id_ = H5I_INVALID_HID;
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

// Truncates. fapl: a file-access property list (e.g. MPI-IO and alignment for checkpoints).
Handle create_file(const std::string& path, hid_t fapl = H5P_DEFAULT);
Handle open_file(const std::string& path);    // read-only; throws UsageError when not HDF5, truncated or damaged
Handle open_dataset(hid_t file, const std::string& name);  // throws UsageError naming file+dataset
bool has_dataset(hid_t file, const std::string& name);
std::vector<hsize_t> dataset_shape(hid_t dset);

// A 2-D dataset, chunked by rows and written whole. T: int32_t, uint8_t or float.
template <typename T>
void write_matrix(hid_t file, const std::string& name, const std::vector<T>& data, hsize_t rows, hsize_t cols);
// Reads the given rows (any order, duplicates allowed) through one hyperslab union selection.
// T: int32_t, int64_t or uint8_t; HDF5 converts from the file's integer type, clamping what does not fit.
template <typename T>
std::vector<T> read_rows(hid_t dset, const std::vector<int64_t>& rows, hsize_t cols);

void write_attr(hid_t obj, const std::string& name, const std::string& value);
void write_attr(hid_t obj, const std::string& name, int64_t value);
void write_attr_double(hid_t obj, const std::string& name, double value);  // a named function: no int/double overload surprises
double read_attr_double(hid_t obj, const std::string& name);
bool has_attr(hid_t obj, const std::string& name);
std::string read_attr_string(hid_t obj, const std::string& name);
int64_t read_attr_int(hid_t obj, const std::string& name);

}  // namespace shardtrain::io::h5
