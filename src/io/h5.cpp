#include "shardtrain/io/h5.h"

#include <algorithm>
#include <filesystem>
#include <initializer_list>

#include "shardtrain/runtime/error.h"

namespace shardtrain::io::h5 {

namespace {

template <typename T>
hid_t native_type();
template <>
hid_t native_type<int32_t>() {
  return H5T_NATIVE_INT32;
}
template <>
hid_t native_type<int64_t>() {
  return H5T_NATIVE_INT64;
}
template <>
hid_t native_type<uint8_t>() {
  return H5T_NATIVE_UINT8;
}
template <>
hid_t native_type<float>() {
  return H5T_NATIVE_FLOAT;
}
template <>
hid_t native_type<double>() {
  return H5T_NATIVE_DOUBLE;
}

Handle scalar_space() { return Handle(H5_CHECK(H5Screate(H5S_SCALAR)), H5Sclose); }

}  // namespace

Handle create_file(const std::string& path, hid_t fapl) {
  quiet_errors();
  Handle fcpl(H5_CHECK(H5Pcreate(H5P_FILE_CREATE)), H5Pclose);
  H5_CHECK(
      H5Pset_obj_track_times(fcpl, false));  // no timestamps: the same input writes the same bytes
  return Handle(H5_CHECK(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl, fapl)), H5Fclose);
}

Handle open_file(const std::string& path) {
  quiet_errors();
  if (!std::filesystem::is_regular_file(path))
    throw runtime::UsageError(path + " does not exist or is not a file");
#if H5_VERSION_GE(1, 12, 0)
  const htri_t is_h5 = H5Fis_accessible(path.c_str(), H5P_DEFAULT);
#else
  const htri_t is_h5 = H5Fis_hdf5(path.c_str());  // Debian 12 ships HDF5 1.10
#endif
  if (is_h5 <= 0)
    throw runtime::UsageError(path + " is not an HDF5 file; produce it with 'shardtrain prepare'");
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0)  // a truncated copy or a half-written file: HDF5 checks the stored end of file here
    throw runtime::UsageError(
        path + " is truncated or damaged (HDF5: " + runtime::detail::h5_error_string() +
        "); copy it again or re-create it");
  return Handle(f, H5Fclose);
}

bool has_dataset(hid_t file, const std::string& name) {
  return H5Lexists(file, name.c_str(), H5P_DEFAULT) > 0;
}

Handle open_dataset(hid_t file, const std::string& name) {
  if (H5Lexists(file, name.c_str(), H5P_DEFAULT) <= 0) {
    char fname[1024] = {0};
    H5Fget_name(file, fname, sizeof fname);
    throw runtime::UsageError(std::string(fname) + " has no dataset " + name);
  }
  return Handle(H5_CHECK(H5Dopen2(file, name.c_str(), H5P_DEFAULT)), H5Dclose);
}

template <typename T>
void write_matrix(hid_t file, const std::string& name, const std::vector<T>& data, hsize_t rows,
                  hsize_t cols) {
  const hsize_t dims[2] = {rows, cols};
  Handle space(H5_CHECK(H5Screate_simple(2, dims, nullptr)), H5Sclose);
  Handle dcpl(H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)), H5Pclose);
  // Row-aligned chunks of ~256 KiB keep a random batch of rows to a few chunk reads each.
  const hsize_t chunk_rows =
      std::max<hsize_t>(1, std::min<hsize_t>(rows, (256 * 1024) / (sizeof(T) * cols + 1)));
  const hsize_t chunk[2] = {chunk_rows, cols};
  if (rows > 0) H5_CHECK(H5Pset_chunk(dcpl, 2, chunk));
  H5_CHECK(H5Pset_obj_track_times(dcpl, false));
  Handle dset(H5_CHECK(H5Dcreate2(file, name.c_str(), native_type<T>(), space, H5P_DEFAULT, dcpl,
                                  H5P_DEFAULT)),
              H5Dclose);
  if (rows > 0)
    H5_CHECK(H5Dwrite(dset, native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()));
}

template <typename T>
std::vector<T> read_rows(hid_t dset, const std::vector<int64_t>& rows, hsize_t cols) {
  std::vector<T> out(rows.size() * cols);
  if (rows.empty()) return out;
  // A union selection is read in file order, so read sorted unique rows, then place them.
  std::vector<int64_t> sorted(rows);
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  Handle fspace(H5_CHECK(H5Dget_space(dset)), H5Sclose);
  H5_CHECK(H5Sselect_none(fspace));
  for (size_t i = 0; i < sorted.size();) {  // runs of consecutive rows become one block
    size_t j = i + 1;
    while (j < sorted.size() && sorted[j] == sorted[j - 1] + 1) ++j;
    const hsize_t start[2] = {static_cast<hsize_t>(sorted[i]), 0},
                  count[2] = {static_cast<hsize_t>(j - i), cols};
    H5_CHECK(H5Sselect_hyperslab(fspace, H5S_SELECT_OR, start, nullptr, count, nullptr));
    i = j;
  }
  const hsize_t mdims[2] = {sorted.size(), cols};
  Handle mspace(H5_CHECK(H5Screate_simple(2, mdims, nullptr)), H5Sclose);
  std::vector<T> buf(sorted.size() * cols);
  H5_CHECK(H5Dread(dset, native_type<T>(), mspace, fspace, H5P_DEFAULT, buf.data()));
  for (size_t r = 0; r < rows.size(); ++r) {
    const size_t k = std::lower_bound(sorted.begin(), sorted.end(), rows[r]) - sorted.begin();
    std::copy_n(buf.begin() + k * cols, cols, out.begin() + r * cols);
  }
  return out;
}

template void write_matrix<int32_t>(hid_t, const std::string&, const std::vector<int32_t>&, hsize_t,
                                    hsize_t);
template void write_matrix<uint8_t>(hid_t, const std::string&, const std::vector<uint8_t>&, hsize_t,
                                    hsize_t);
template void write_matrix<float>(hid_t, const std::string&, const std::vector<float>&, hsize_t,
                                  hsize_t);
template void write_matrix<double>(hid_t, const std::string&, const std::vector<double>&, hsize_t,
                                   hsize_t);
template std::vector<double> read_rows<double>(hid_t, const std::vector<int64_t>&, hsize_t);
template std::vector<int32_t> read_rows<int32_t>(hid_t, const std::vector<int64_t>&, hsize_t);
template std::vector<int64_t> read_rows<int64_t>(hid_t, const std::vector<int64_t>&, hsize_t);
template std::vector<uint8_t> read_rows<uint8_t>(hid_t, const std::vector<int64_t>&, hsize_t);

void write_attr(hid_t obj, const std::string& name, const std::string& value) {
  Handle type(H5_CHECK(H5Tcopy(H5T_C_S1)), H5Tclose);
  H5_CHECK(H5Tset_size(type, H5T_VARIABLE));  // variable-length UTF-8: h5py reads it as str
  H5_CHECK(H5Tset_cset(type, H5T_CSET_UTF8));
  Handle space = scalar_space();
  Handle attr(H5_CHECK(H5Acreate2(obj, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT)),
              H5Aclose);
  const char* p = value.c_str();
  H5_CHECK(H5Awrite(attr, type, &p));
}

void write_attr(hid_t obj, const std::string& name, int64_t value) {
  Handle space = scalar_space();
  Handle attr(
      H5_CHECK(H5Acreate2(obj, name.c_str(), H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT)),
      H5Aclose);
  H5_CHECK(H5Awrite(attr, H5T_NATIVE_INT64, &value));
}

void write_attr_double(hid_t obj, const std::string& name, double value) {
  Handle space = scalar_space();
  Handle attr(
      H5_CHECK(H5Acreate2(obj, name.c_str(), H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT)),
      H5Aclose);
  H5_CHECK(H5Awrite(attr, H5T_NATIVE_DOUBLE, &value));
}

namespace {

std::string file_name(hid_t obj) {
  char fname[1024] = {0};
  H5Fget_name(obj, fname, sizeof fname);
  return fname;
}

// Opens an attribute that must hold one value: H5Aread writes every element of the attribute's
// dataspace, so an array attribute in a foreign or damaged file would overrun the one-value buffer.
// Its type must be of one of the classes given (HDF5 would otherwise convert a float to an
// integer).
Handle open_single_attr(hid_t obj, const std::string& name,
                        std::initializer_list<H5T_class_t> classes, const char* want) {
  Handle attr(H5_CHECK(H5Aopen(obj, name.c_str(), H5P_DEFAULT)), H5Aclose);
  Handle space(H5_CHECK(H5Aget_space(attr)), H5Sclose);
  if (H5_CHECK(H5Sget_simple_extent_npoints(space)) != 1)
    throw runtime::Error(file_name(obj) + ": attribute " + name +
                         " is not a single value; the file is not what shardtrain wrote");
  Handle type(H5_CHECK(H5Aget_type(attr)), H5Tclose);
  if (std::find(classes.begin(), classes.end(), H5Tget_class(type)) == classes.end())
    throw runtime::UsageError(
        file_name(obj) + ": attribute " + name + " is " + type_name(type) + ", expected " + want +
        "; the file is not what shardtrain wrote (re-create it with shardtrain)");
  return attr;
}

}  // namespace

double read_attr_double(hid_t obj, const std::string& name) {
  Handle attr = open_single_attr(obj, name, {H5T_INTEGER, H5T_FLOAT}, "a number");
  double v = 0;
  H5_CHECK(H5Aread(attr, H5T_NATIVE_DOUBLE, &v));
  return v;
}

bool has_attr(hid_t obj, const std::string& name) {
  return H5_CHECK(H5Aexists(obj, name.c_str())) > 0;
}

std::string read_attr_string(hid_t obj, const std::string& name) {
  Handle attr = open_single_attr(obj, name, {H5T_STRING}, "a string");
  Handle type(H5_CHECK(H5Aget_type(attr)), H5Tclose);
  if (H5Tis_variable_str(type) > 0) {
    char* s = nullptr;
    H5_CHECK(H5Aread(attr, type, &s));  // the file's own string type: no charset conversion
    std::string out = s ? s : "";
    H5free_memory(s);
    return out;
  }
  std::string out(H5Tget_size(type), '\0');
  H5_CHECK(H5Aread(attr, type, out.data()));
  return out.substr(0, out.find('\0'));
}

int64_t read_attr_int(hid_t obj, const std::string& name) {
  Handle attr = open_single_attr(obj, name, {H5T_INTEGER}, "an integer");
  int64_t v = 0;
  H5_CHECK(H5Aread(attr, H5T_NATIVE_INT64, &v));
  return v;
}

}  // namespace shardtrain::io::h5
