#include "shardtrain/ckpt/dataset_check.h"

#include <ATen/ATen.h>

#include <sstream>

#include "shardtrain/ckpt/crc_assembly.h"
#include "shardtrain/io/h5.h"
#include "shardtrain/io/h5_types.h"

namespace shardtrain::ckpt {
namespace {

#if H5_VERSION_GE(1, 12, 0)
using LinkInfo = H5L_info2_t;
#else
using LinkInfo = H5L_info_t;  // Debian 12 ships HDF5 1.10
#endif

herr_t collect(hid_t, const char* name, const LinkInfo*, void* out) {
  static_cast<std::vector<std::string>*>(out)->push_back(name);
  return 0;
}

std::vector<std::string> children(hid_t parent, const std::string& path) {
  std::vector<std::string> names;
  io::h5::Handle g(H5_CHECK(H5Gopen2(parent, path.c_str(), H5P_DEFAULT)), H5Gclose);
  H5_CHECK(H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, nullptr, collect, &names));
  return names;
}

DatasetCheck check(hid_t file, const std::string& path) {
  io::h5::Handle d = io::h5::open_dataset(file, path);
  const auto dims = io::h5::dataset_shape(d);
  std::ostringstream shape;
  shape << "[";
  hsize_t n = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    shape << (i ? ", " : "") << dims[i];
    n *= dims[i];
  }
  shape << "]";
  // HDF5 would convert any other type to float and the CRC would merely fail: name the type
  // instead.
  const io::h5::Expected any_f32{io::h5::Element::kFloat32, std::vector<int64_t>(dims.size(), -1),
                                 ""};
  if (!io::h5::dataset_mismatch(d, "", path, any_f32).empty()) {
    io::h5::Handle type(H5_CHECK(H5Dget_type(d)), H5Tclose);
    return {path, shape.str(), "NOT float32 but " + io::h5::type_name(type)};
  }
  std::vector<float> buf(n);
  H5_CHECK(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()));
  const uint32_t crc = crc_of(at::from_blob(buf.data(), {static_cast<int64_t>(n)}, at::kFloat));
  const bool has = io::h5::has_attr(d, "crc32");
  const bool ok = has && io::h5::read_attr_int(d, "crc32") == static_cast<int64_t>(crc);
  return {path, shape.str(), !has ? "no checksum" : ok ? "ok" : "CORRUPT"};
}

}  // namespace

std::vector<DatasetCheck> check_datasets(hid_t file) {
  std::vector<DatasetCheck> rows;
  for (const std::string& group : children(file, "/"))  // every piece's, whoever registered it
    for (const auto& name : children(file, group))
      rows.push_back(check(file, std::string("/") + group + "/" + name));
  return rows;
}

}  // namespace shardtrain::ckpt
