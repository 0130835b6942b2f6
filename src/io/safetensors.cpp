#include "shardtrain/io/safetensors.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "shardtrain/runtime/atomic_write.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::io {
namespace fs = std::filesystem;
namespace {

constexpr uint64_t kMaxHeader = 100ull << 20;  // the limit Hugging Face's reader enforces

// The one table of dtypes: safetensors name, our enum, LibTorch's type, bytes per element.
struct DTypeRow {
  const char* name;
  StDType st;
  at::ScalarType scalar;
  size_t size;
};
const DTypeRow kDTypes[] = {
    {"F64", StDType::F64, at::kDouble, 8}, {"F32", StDType::F32, at::kFloat, 4},
    {"F16", StDType::F16, at::kHalf, 2},   {"BF16", StDType::BF16, at::kBFloat16, 2},
    {"I64", StDType::I64, at::kLong, 8},   {"I32", StDType::I32, at::kInt, 4},
    {"I16", StDType::I16, at::kShort, 2},  {"I8", StDType::I8, at::kChar, 1},
    {"U8", StDType::U8, at::kByte, 1},     {"BOOL", StDType::BOOL, at::kBool, 1}};

const DTypeRow& row(StDType d) {
  for (const auto& r : kDTypes)
    if (r.st == d) return r;
  return kDTypes[1];
}

at::ScalarType to_scalar(StDType d) { return row(d).scalar; }

StDType from_scalar(at::ScalarType s, const std::string& name) {
  for (const auto& r : kDTypes)
    if (r.scalar == s) return r.st;
  throw runtime::Error("safetensors: tensor '" + name + "' has a dtype safetensors cannot store");
}

[[noreturn]] void bad(const std::string& origin, const std::string& what) {
  throw runtime::Error(origin + ": malformed safetensors: " + what);
}

uint64_t read_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

int64_t StTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

size_t st_dtype_size(StDType d) { return row(d).size; }

const char* st_dtype_name(StDType d) { return row(d).name; }

StHeader parse_safetensors_header(const uint8_t* file, size_t file_size,
                                  const std::string& origin) {
  if (file_size < 8)
    bad(origin,
        "file is " + std::to_string(file_size) + " bytes, shorter than the 8-byte header length");
  const uint64_t hlen = read_le64(file);
  if (hlen > file_size - 8)
    bad(origin, "header length " + std::to_string(hlen) + " runs past the end of the " +
                    std::to_string(file_size) + "-byte file (truncated?)");
  if (hlen > kMaxHeader) bad(origin, "header length " + std::to_string(hlen) + " exceeds 100 MiB");
  StHeader h;
  h.data_start = 8 + hlen;
  const uint64_t data_size = file_size - h.data_start;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(file + 8, file + 8 + hlen);
  } catch (const nlohmann::json::exception& e) {
    bad(origin, std::string("header is not valid JSON (") + e.what() + ")");
  }
  if (!j.is_object()) bad(origin, "header is not a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const auto& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) bad(origin, "__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          bad(origin, "__metadata__ value '" + m.key() + "' is not a string");
        h.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor '" + name + "'";
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
        !v.contains("data_offsets"))
      bad(origin, where + " needs dtype, shape and data_offsets");
    StTensorInfo t;
    t.name = name;
    if (!v["dtype"].is_string()) bad(origin, where + ": dtype is not a string");
    const std::string dt = v["dtype"].get<std::string>();
    auto d = std::find_if(std::begin(kDTypes), std::end(kDTypes),
                          [&](const DTypeRow& r) { return dt == r.name; });
    if (d == std::end(kDTypes)) bad(origin, where + ": unknown dtype '" + dt + "'");
    t.dtype = d->st;
    if (!v["shape"].is_array()) bad(origin, where + ": shape is not an array");
    unsigned __int128 numel = 1;
    for (const auto& s : v["shape"]) {
      if (!s.is_number_integer() || s.get<int64_t>() < 0)
        bad(origin, where + ": shape has a non-integer or negative dimension");
      t.shape.push_back(s.get<int64_t>());
      numel *= static_cast<uint64_t>(t.shape.back());
      if (numel > (static_cast<unsigned __int128>(1) << 62))
        bad(origin, where + ": shape is absurdly large");
    }
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
        !off[1].is_number_unsigned())
      bad(origin, where + ": data_offsets must be two non-negative integers");
    t.begin = off[0].get<uint64_t>();
    t.end = off[1].get<uint64_t>();
    if (t.begin > t.end || t.end > data_size)
      bad(origin, where + ": data_offsets [" + std::to_string(t.begin) + ", " +
                      std::to_string(t.end) + ") are out of range of the " +
                      std::to_string(data_size) + "-byte data section");
    const unsigned __int128 need = numel * st_dtype_size(t.dtype);
    if (need != t.end - t.begin)
      bad(origin, where + ": shape and dtype " + dt + " need " +
                      std::to_string(static_cast<uint64_t>(need)) +
                      " bytes but data_offsets span " + std::to_string(t.end - t.begin));
    h.tensors.push_back(std::move(t));
  }
  std::vector<const StTensorInfo*> by_off;
  for (const auto& t : h.tensors) by_off.push_back(&t);
  std::sort(by_off.begin(), by_off.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_off.size(); ++i)
    if (by_off[i]->begin < by_off[i - 1]->end)
      bad(origin, "tensors '" + by_off[i - 1]->name + "' and '" + by_off[i]->name + "' overlap");
  return h;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(path) {
  header_ = parse_safetensors_header(file_.data(), file_.size(), path);
  for (size_t i = 0; i < header_.tensors.size(); ++i) index_[header_.tensors[i].name] = i;
}

const StTensorInfo* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

const StTensorInfo& SafetensorsFile::info(const std::string& name) const {
  const auto* t = find(name);
  if (!t) throw runtime::Error(path() + ": no tensor named '" + name + "'");
  return *t;
}

at::Tensor SafetensorsFile::copy_out(const StTensorInfo& t, uint64_t byte_off, uint64_t nbytes,
                                     std::vector<int64_t> shape) const {
  at::Tensor out = at::empty(shape, at::TensorOptions().dtype(to_scalar(t.dtype)));
  if (nbytes)
    std::memcpy(out.data_ptr(), file_.data() + header_.data_start + t.begin + byte_off, nbytes);
  bytes_read_ += nbytes;
  return out;
}

at::Tensor SafetensorsFile::read(const std::string& name) const {
  const auto& t = info(name);
  return copy_out(t, 0, t.end - t.begin, t.shape);
}

at::Tensor SafetensorsFile::read_rows(const std::string& name, int64_t row_begin,
                                      int64_t row_end) const {
  const auto& t = info(name);
  if (t.shape.empty())
    throw runtime::Error(path() + ": tensor '" + name + "' is a scalar and has no rows");
  if (row_begin < 0 || row_begin > row_end || row_end > t.shape[0])
    throw runtime::Error(path() + ": rows [" + std::to_string(row_begin) + ", " +
                         std::to_string(row_end) + ") out of range for tensor '" + name +
                         "' with " + std::to_string(t.shape[0]) + " rows");
  const uint64_t row_bytes = t.shape[0] ? (t.end - t.begin) / t.shape[0] : 0;
  auto shape = t.shape;
  shape[0] = row_end - row_begin;
  return copy_out(t, row_begin * row_bytes, (row_end - row_begin) * row_bytes, shape);
}

at::Tensor SafetensorsFile::read_flat(const std::string& name, int64_t begin, int64_t end) const {
  const auto& t = info(name);
  if (begin < 0 || begin > end || end > t.numel())
    throw runtime::Error(path() + ": elements [" + std::to_string(begin) + ", " +
                         std::to_string(end) + ") out of range for tensor '" + name + "' of " +
                         std::to_string(t.numel()) + " elements");
  const uint64_t es = st_dtype_size(t.dtype);
  return copy_out(t, begin * es, (end - begin) * es, {end - begin});
}

SafetensorsModel::SafetensorsModel(const std::string& path) {
  fs::path p(path);
  std::error_code
      ec;  // the non-throwing forms: a name too long for the OS is an error of the option
  if (fs::is_directory(p, ec)) {
    p = fs::exists(p / "model.safetensors.index.json", ec) ? p / "model.safetensors.index.json"
                                                           : p / "model.safetensors";
  }
  if (!fs::exists(p, ec))
    throw runtime::UsageError("--weights: " + p.string() +
                              (ec ? ": " + ec.message() : " does not exist"));
  if (p.extension() != ".json") {
    files_.push_back(std::make_unique<SafetensorsFile>(p.string()));
    for (const auto& t : files_[0]->tensors()) where_[t.name] = 0;
    return;
  }
  std::ifstream in(p, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  std::map<std::string, size_t> file_ids;
  for (const auto& [tensor, f] : parse_safetensors_index(text.str(), p.string())) {
    if (!file_ids.count(f)) {
      file_ids[f] = files_.size();
      files_.push_back(std::make_unique<SafetensorsFile>((p.parent_path() / f).string()));
    }
    const auto& file = *files_[file_ids[f]];
    if (!file.find(tensor))
      throw runtime::Error(p.string() + ": index maps '" + tensor + "' to " + f +
                           ", which lacks it");
    where_[tensor] = file_ids[f];
  }
}

std::map<std::string, std::string> parse_safetensors_index(const std::string& text,
                                                           const std::string& origin) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw runtime::Error(origin + ": invalid index JSON: " + e.what());
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw runtime::Error(origin + ": index has no \"weight_map\" object");
  std::map<std::string, std::string> where;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (!it.value().is_string())
      throw runtime::Error(origin + ": weight_map['" + it.key() + "'] is not a file name");
    const std::string f = it.value().get<std::string>();
    // Shards sit beside the index: a path elsewhere is a damaged or hostile index.
    if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
      throw runtime::Error(origin + ": weight_map['" + it.key() + "'] = '" + f +
                           "' is not a file name in the index's directory");
    where[it.key()] = f;
  }
  return where;
}

std::vector<std::string> SafetensorsModel::names() const {
  std::vector<std::string> n;
  for (const auto& kv : where_) n.push_back(kv.first);
  return n;
}

const SafetensorsFile& SafetensorsModel::file_of(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) {
    std::string origin = files_.empty() ? "safetensors" : files_[0]->path();
    throw runtime::Error(origin + ": missing tensor '" + name + "'");
  }
  return *files_[it->second];
}

uint64_t SafetensorsModel::bytes_read() const {
  uint64_t n = 0;
  for (const auto& f : files_) n += f->bytes_read();
  return n;
}

void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<std::pair<std::string, at::Tensor>> sorted;
  for (const auto& [n, t] : tensors) sorted.emplace_back(n, t.contiguous().cpu());
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  nlohmann::json h = nlohmann::json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t off = 0;
  for (const auto& [n, t] : sorted) {
    const uint64_t nb = t.numel() * t.element_size();
    h[n] = {{"dtype", st_dtype_name(from_scalar(t.scalar_type(), n))},
            {"shape", t.sizes().vec()},
            {"data_offsets", {off, off + nb}}};
    off += nb;
  }
  std::string hs = h.dump();
  hs.append((8 - hs.size() % 8) % 8, ' ');
  // PATH.tmp, renamed when whole; a full disk or quota is one line naming path (exit 2).
  runtime::write_atomically(path, [&](const std::string& tmp) {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw runtime::Error("cannot write " + tmp + ": " + std::strerror(errno));
    uint8_t len[8];
    for (int i = 0; i < 8; ++i)
      len[i] = static_cast<uint8_t>(static_cast<uint64_t>(hs.size()) >> (8 * i));
    out.write(reinterpret_cast<const char*>(len), 8);
    out.write(hs.data(), static_cast<std::streamsize>(hs.size()));
    for (const auto& [n, t] : sorted)
      out.write(static_cast<const char*>(t.data_ptr()),
                static_cast<std::streamsize>(t.numel() * t.element_size()));
    if (!out.flush()) throw runtime::Error("write failed for " + tmp + ": " + std::strerror(errno));
    out.close();
    if (!out) throw runtime::Error("write failed for " + tmp + ": " + std::strerror(errno));
  });
}

std::vector<std::string> write_safetensors_sharded(const std::string& dir,
                                                   const NamedTensors& tensors,
                                                   uint64_t max_shard_bytes) {
  fs::create_directories(dir);
  std::vector<NamedTensors> shards(1);
  uint64_t cur = 0, total = 0;
  for (const auto& nt : tensors) {
    const uint64_t nb = nt.second.numel() * nt.second.element_size();
    if (cur > 0 && cur + nb > max_shard_bytes) {
      shards.emplace_back();
      cur = 0;
    }
    shards.back().push_back(nt);
    cur += nb;
    total += nb;
  }
  std::vector<std::string> names;
  if (shards.size() == 1) {
    write_safetensors((fs::path(dir) / "model.safetensors").string(), tensors, {{"format", "pt"}});
    return {"model.safetensors"};
  }
  nlohmann::json index = {{"metadata", {{"total_size", total}}},
                          {"weight_map", nlohmann::json::object()}};
  for (size_t i = 0; i < shards.size(); ++i) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    write_safetensors((fs::path(dir) / buf).string(), shards[i], {{"format", "pt"}});
    for (const auto& nt : shards[i]) index["weight_map"][nt.first] = buf;
    names.push_back(buf);
  }
  runtime::write_file_atomically((fs::path(dir) / "model.safetensors.index.json").string(),
                                 index.dump(2) + "\n");
  return names;
}

}  // namespace shardtrain::io
