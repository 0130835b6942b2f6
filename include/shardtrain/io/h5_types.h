// What an HDF5 dataset holds, its element type and shape, described and checked against what a
// reader expects: every reader of token files and checkpoints checks its datasets here, so a
// float token file or a float64 tensor is refused with one line instead of converted silently.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

namespace shardtrain::io::h5 {

// The element types readers accept. HDF5 converts any integer width to the reader's own type.
enum class Element {
  kInteger,        // any signed or unsigned integer width
  kIntegerOrBool,  // an integer, or h5py's bool (an HDF5 enum over an integer type)
  kFloat32,        // IEEE float of 4 bytes, exactly
};

std::vector<hsize_t> dataset_shape(hid_t dset);

struct Expected {
  Element element = Element::kInteger;
  std::vector<int64_t> dims;  // the shape; -1: any extent in that dimension
  std::string dims_text;  // how the line names the shape ("[rows, seq_len]"); "": dims themselves
};

// "int32", "uint8", "float64", "enum of int8 (bool)", "string", "compound", ...
std::string type_name(hid_t type);
// "[8, 16]"; "[]" for a scalar.
std::string shape_text(const std::vector<hsize_t>& dims);
// Why the dataset is not what want says ("" when it is): "dataset /tokens of FILE is float32
// [8, 16], expected an integer type of shape [rows, seq_len]".
std::string dataset_mismatch(hid_t dset, const std::string& file, const std::string& name,
                             const Expected& want);
// Throws UsageError with dataset_mismatch's line and "; " + fix when the dataset is not what
// want says; returns its shape.
std::vector<hsize_t> check_dataset(hid_t dset, const std::string& file, const std::string& name,
                                   const Expected& want, const std::string& fix);

}  // namespace shardtrain::io::h5
