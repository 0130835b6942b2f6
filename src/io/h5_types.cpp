#include "shardtrain/io/h5_types.h"

#include "shardtrain/io/h5_handle.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::io::h5 {

std::vector<hsize_t> dataset_shape(hid_t dset) {
  Handle space(H5_CHECK(H5Dget_space(dset)), H5Sclose);
  const int rank = H5_CHECK(H5Sget_simple_extent_ndims(space));
  std::vector<hsize_t> dims(rank);
  H5_CHECK(H5Sget_simple_extent_dims(space, dims.data(), nullptr));
  return dims;
}
namespace {

std::string integer_name(hid_t type) {
  const bool is_signed = H5Tget_sign(type) != H5T_SGN_NONE;
  return std::string(is_signed ? "int" : "uint") + std::to_string(8 * H5Tget_size(type));
}

bool accepted(hid_t type, Element e) {
  const H5T_class_t cls = H5Tget_class(type);
  switch (e) {
    case Element::kInteger:
      return cls == H5T_INTEGER;
    case Element::kIntegerOrBool:
      if (cls == H5T_ENUM) {  // h5py's numpy bool; HDF5 converts an enum to its base integer type
        Handle base(H5_CHECK(H5Tget_super(type)), H5Tclose);
        return H5Tget_class(base) == H5T_INTEGER;
      }
      return cls == H5T_INTEGER;
    case Element::kFloat32:
      return cls == H5T_FLOAT && H5Tget_size(type) == 4;
  }
  return false;
}

const char* element_text(Element e) {
  switch (e) {
    case Element::kInteger:
      return "an integer type";
    case Element::kIntegerOrBool:
      return "an integer or bool type";
    case Element::kFloat32:
      return "float32";
  }
  return "";
}

std::string expected_shape(const Expected& want) {
  if (!want.dims_text.empty()) return want.dims_text;
  std::string s = "[";
  for (size_t i = 0; i < want.dims.size(); ++i)
    s += (i ? ", " : "") + (want.dims[i] < 0 ? "*" : std::to_string(want.dims[i]));
  return s + "]";
}

}  // namespace

std::string type_name(hid_t type) {
  switch (H5Tget_class(type)) {
    case H5T_INTEGER:
      return integer_name(type);
    case H5T_FLOAT:
      return "float" + std::to_string(8 * H5Tget_size(type));
    case H5T_ENUM: {
      Handle base(H5_CHECK(H5Tget_super(type)), H5Tclose);
      return "enum of " + type_name(base) + (H5Tget_nmembers(type) == 2 ? " (bool)" : "");
    }
    case H5T_STRING:
      return "string";
    case H5T_COMPOUND:
      return "compound";
    case H5T_ARRAY:
      return "array";
    case H5T_VLEN:
      return "variable-length";
    case H5T_OPAQUE:
      return "opaque";
    case H5T_BITFIELD:
      return "bitfield";
    case H5T_REFERENCE:
      return "reference";
    case H5T_TIME:
      return "time";
    default:
      return "an unknown type";
  }
}

std::string shape_text(const std::vector<hsize_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

std::string dataset_mismatch(hid_t dset, const std::string& file, const std::string& name,
                             const Expected& want) {
  Handle type(H5_CHECK(H5Dget_type(dset)), H5Tclose);
  const std::vector<hsize_t> dims = dataset_shape(dset);
  bool shape_ok = dims.size() == want.dims.size();
  for (size_t i = 0; shape_ok && i < dims.size(); ++i)
    shape_ok = want.dims[i] < 0 || static_cast<int64_t>(dims[i]) == want.dims[i];
  if (shape_ok && accepted(type, want.element)) return "";
  return "dataset " + name + " of " + file + " is " + type_name(type) + " " + shape_text(dims) +
         ", expected " + element_text(want.element) + " of shape " + expected_shape(want);
}

std::vector<hsize_t> check_dataset(hid_t dset, const std::string& file, const std::string& name,
                                   const Expected& want, const std::string& fix) {
  if (const std::string why = dataset_mismatch(dset, file, name, want); !why.empty())
    throw runtime::UsageError(why + "; " + fix);
  return dataset_shape(dset);
}

}  // namespace shardtrain::io::h5
