// Hugging Face .safetensors, read and written by our own parser: an 8-byte little-endian header
// length, a JSON header {name: {dtype, shape, data_offsets}}, then the raw little-endian bytes.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "shardtrain/io/mapped_file.h"

namespace shardtrain::io {

enum class StDType { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL };

struct StTensorInfo {
  std::string name;
  StDType dtype = StDType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets inside the data section
  int64_t numel() const;
};

struct StHeader {
  uint64_t data_start = 0;  // 8 + header length
  std::vector<StTensorInfo> tensors;
  std::map<std::string, std::string> metadata;
};

size_t st_dtype_size(StDType d);
const char* st_dtype_name(StDType d);
// Validates everything a reader relies on; throws Error("<origin>: ...") on any defect.
StHeader parse_safetensors_header(const uint8_t* file, size_t file_size, const std::string& origin);
// model.safetensors.index.json's weight_map: tensor name -> shard file name (a plain name in the
// index's directory). Throws Error("<origin>: ...") on any defect.
std::map<std::string, std::string> parse_safetensors_index(const std::string& text,
                                                           const std::string& origin);

// One .safetensors file, memory-mapped.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  const std::vector<StTensorInfo>& tensors() const { return header_.tensors; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  const StTensorInfo* find(const std::string& name) const;
  const StTensorInfo& info(const std::string& name) const;  // throws naming tensor and file
  at::Tensor read(const std::string& name) const;
  at::Tensor read_rows(const std::string& name, int64_t row_begin, int64_t row_end) const;
  // Elements [begin, end) of the row-major flattened tensor, as a 1-D tensor.
  at::Tensor read_flat(const std::string& name, int64_t begin, int64_t end) const;
  const std::string& path() const { return file_.path(); }
  uint64_t bytes_read() const { return bytes_read_; }

 private:
  at::Tensor copy_out(const StTensorInfo& t, uint64_t byte_off, uint64_t nbytes,
                      std::vector<int64_t> shape) const;
  MappedFile file_;
  StHeader header_;
  std::map<std::string, size_t> index_;
  mutable uint64_t bytes_read_ = 0;
};

// A model's weights: one file, a directory, or a sharded set behind model.safetensors.index.json.
class SafetensorsModel {
 public:
  explicit SafetensorsModel(const std::string& path);
  std::vector<std::string> names() const;
  bool has(const std::string& name) const { return where_.count(name) > 0; }
  const SafetensorsFile& file_of(const std::string& name) const;
  const StTensorInfo& info(const std::string& name) const { return file_of(name).info(name); }
  at::Tensor read(const std::string& name) const { return file_of(name).read(name); }
  at::Tensor read_flat(const std::string& name, int64_t b, int64_t e) const {
    return file_of(name).read_flat(name, b, e);
  }
  uint64_t bytes_read() const;
  size_t num_files() const { return files_.size(); }

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> where_;
};

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// Tensors are written in name order; the header is padded with spaces to 8 bytes.
void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata = {});
// Splits into files of at most max_shard_bytes and writes model.safetensors.index.json.
// Returns the file names written (just "model.safetensors" when everything fits in one).
std::vector<std::string> write_safetensors_sharded(const std::string& dir,
                                                   const NamedTensors& tensors,
                                                   uint64_t max_shard_bytes);

}  // namespace shardtrain::io
