#include "shardtrain/data/token_file.h"

#include <ATen/ATen.h>
#include <unistd.h>

#include <filesystem>

#include "shardtrain/runtime/error.h"

namespace shardtrain {

namespace {

void write_meta(hid_t f, const TokenFileMeta& m) {
  using h5::write_attr;
  write_attr(f, "format_version", kTokenFileVersion);
  write_attr(f, "seq_len", m.seq_len);
  write_attr(f, "rows", m.rows);
  write_attr(f, "samples", m.samples);
  write_attr(f, "tokens", m.tokens);
  write_attr(f, "loss_tokens", m.loss_tokens);
  write_attr(f, "max_token_id", m.max_token_id);
  write_attr(f, "samples_read", m.samples_read);
  write_attr(f, "samples_skipped", m.samples_skipped);
  write_attr(f, "samples_truncated", m.samples_truncated);
  write_attr(f, "skip_reasons", m.skip_reasons_json);
  write_attr(f, "pad_id", static_cast<int64_t>(m.pad_id));
  write_attr(f, "packing", m.packing);
  write_attr(f, "format", m.format);
  write_attr(f, "split", m.split);
  write_attr(f, "tokenizer_sha256", m.tokenizer_sha256);
  write_attr(f, "tokenizer_vocab_size", m.tokenizer_vocab_size);
  write_attr(f, "source_file", m.source_file);
  write_attr(f, "source_sha256", m.source_sha256);
}

}  // namespace

void write_token_file(const std::string& path, const Rows& rows, TokenFileMeta meta) {
  std::lock_guard<std::recursive_mutex> lock(h5::library_lock());
  meta.seq_len = rows.seq_len, meta.rows = rows.rows, meta.tokens = rows.tokens, meta.loss_tokens = rows.loss_tokens;
  meta.max_token_id = 0;
  for (int32_t t : rows.tokens_data) meta.max_token_id = std::max<int64_t>(meta.max_token_id, t);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  try {
    {
      h5::Handle f = h5::create_file(tmp);
      h5::write_matrix<int32_t>(f, "tokens", rows.tokens_data, rows.rows, rows.seq_len);
      h5::write_matrix<uint8_t>(f, "loss_mask", rows.mask_data, rows.rows, rows.seq_len);
      write_meta(f, meta);
      H5_CHECK(H5Fflush(f, H5F_SCOPE_GLOBAL));
    }
    std::filesystem::rename(tmp, path);
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    throw;
  }
}

TokenFile::TokenFile(const std::string& path) : path_(path) {
  std::lock_guard<std::recursive_mutex> lock(h5::library_lock());
  file_ = h5::open_file(path);
  if (!h5::has_attr(file_, "format_version") || !h5::has_attr(file_, "seq_len"))
    throw UsageError(path + " is not a shardtrain token file (no format_version/seq_len); make it with 'shardtrain prepare'");
  const int64_t version = h5::read_attr_int(file_, "format_version");
  if (version > kTokenFileVersion)
    throw UsageError(path + " has token-file format " + std::to_string(version) + ", newer than this build's " +
                     std::to_string(kTokenFileVersion) + "; upgrade shardtrain or re-run prepare");
  tokens_ = h5::open_dataset(file_, "tokens");
  mask_ = h5::open_dataset(file_, "loss_mask");
  const auto shape = h5::dataset_shape(tokens_);
  if (shape.size() != 2 || h5::dataset_shape(mask_) != shape)
    throw UsageError(path + ": /tokens and /loss_mask must both be [rows, seq_len]");
  meta_.rows = static_cast<int64_t>(shape[0]);
  meta_.seq_len = static_cast<int64_t>(shape[1]);
  auto int_attr = [&](const char* n) { return h5::has_attr(file_, n) ? h5::read_attr_int(file_, n) : 0; };
  auto str_attr = [&](const char* n) { return h5::has_attr(file_, n) ? h5::read_attr_string(file_, n) : ""; };
  meta_.samples = int_attr("samples"), meta_.tokens = int_attr("tokens"), meta_.loss_tokens = int_attr("loss_tokens");
  meta_.max_token_id = int_attr("max_token_id"), meta_.pad_id = static_cast<int32_t>(int_attr("pad_id"));
  meta_.samples_read = int_attr("samples_read"), meta_.samples_skipped = int_attr("samples_skipped");
  meta_.samples_truncated = int_attr("samples_truncated");
  meta_.tokenizer_vocab_size = int_attr("tokenizer_vocab_size");
  meta_.packing = str_attr("packing"), meta_.format = str_attr("format"), meta_.split = str_attr("split");
  meta_.skip_reasons_json = str_attr("skip_reasons");
  meta_.tokenizer_sha256 = str_attr("tokenizer_sha256");
  meta_.source_file = str_attr("source_file"), meta_.source_sha256 = str_attr("source_sha256");
  if (meta_.rows == 0) throw UsageError(path + " holds no rows");
}

Batch TokenFile::read(const std::vector<int64_t>& rows) const {
  for (int64_t r : rows)
    if (r < 0 || r >= meta_.rows) throw Error(path_ + ": row " + std::to_string(r) + " out of range");
  std::vector<int32_t> toks;
  std::vector<uint8_t> mask;
  {
    std::lock_guard<std::recursive_mutex> lock(h5::library_lock());
    toks = h5::read_rows<int32_t>(tokens_, rows, meta_.seq_len);
    mask = h5::read_rows<uint8_t>(mask_, rows, meta_.seq_len);
  }
  const int64_t b = static_cast<int64_t>(rows.size());
  Batch out;
  out.tokens = at::from_blob(toks.data(), {b, meta_.seq_len}, at::kInt).to(at::kLong);
  auto m = at::from_blob(mask.data(), {b, meta_.seq_len}, at::kByte).to(at::kBool);
  out.labels = at::where(m, out.tokens, at::full_like(out.tokens, -100));
  return out;
}

}  // namespace shardtrain
