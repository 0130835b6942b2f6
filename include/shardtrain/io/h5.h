// Move-only RAII handles and small helpers over the HDF5 C API: files, datasets, dataspaces,
// attributes. Every call goes through H5_CHECK, so failures carry HDF5's own message.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "shardtrain/io/h5_handle.h"
#include "shardtrain/io/h5_types.h"

namespace shardtrain::io::h5 {

// Truncates. fapl: a file-access property list (e.g. MPI-IO and alignment for checkpoints).
Handle create_file(const std::string& path, hid_t fapl = H5P_DEFAULT);
Handle open_file(
    const std::string& path);  // read-only; throws UsageError when not HDF5, truncated or damaged
Handle open_dataset(hid_t file, const std::string& name);  // throws UsageError naming file+dataset
bool has_dataset(hid_t file, const std::string& name);

// A 2-D dataset, chunked by rows and written whole. T: int32_t, uint8_t, float or double.
template <typename T>
void write_matrix(hid_t file, const std::string& name, const std::vector<T>& data, hsize_t rows,
                  hsize_t cols);
// Reads the given rows (any order, duplicates allowed) through one hyperslab union selection.
// T: int32_t, int64_t, uint8_t or double; HDF5 converts from the file's integer type, clamping what
// does not fit.
template <typename T>
std::vector<T> read_rows(hid_t dset, const std::vector<int64_t>& rows, hsize_t cols);

void write_attr(hid_t obj, const std::string& name, const std::string& value);
void write_attr(hid_t obj, const std::string& name, int64_t value);
void write_attr_double(hid_t obj, const std::string& name,
                       double value);  // a named function: no int/double overload surprises
double read_attr_double(hid_t obj, const std::string& name);
bool has_attr(hid_t obj, const std::string& name);
std::string read_attr_string(hid_t obj, const std::string& name);
int64_t read_attr_int(hid_t obj, const std::string& name);

}  // namespace shardtrain::io::h5
