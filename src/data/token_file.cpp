#include "shardtrain/data/token_file.h"

#include <ATen/ATen.h>
#include <unistd.h>

#include <filesystem>

#include "shardtrain/io/h5_types.h"
#include "shardtrain/runtime/atomic_write.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/logging.h"

namespace shardtrain::data {

namespace {

// Every attribute and the field it mirrors: one table serves writing and reading.
using M = TokenFileMeta;
const std::pair<const char*, int64_t M::*> kIntAttrs[] = {
    {"seq_len", &M::seq_len},
    {"rows", &M::rows},
    {"samples", &M::samples},
    {"tokens", &M::tokens},
    {"loss_tokens", &M::loss_tokens},
    {"max_token_id", &M::max_token_id},
    {"samples_read", &M::samples_read},
    {"samples_skipped", &M::samples_skipped},
    {"samples_truncated", &M::samples_truncated},
    {"pad_id", &M::pad_id},
    {"tokenizer_vocab_size", &M::tokenizer_vocab_size}};
const std::pair<const char*, std::string M::*> kStringAttrs[] = {
    {"skip_reasons", &M::skip_reasons_json},
    {"packing", &M::packing},
    {"format", &M::format},
    {"split", &M::split},
    {"tokenizer_sha256", &M::tokenizer_sha256},
    {"source_file", &M::source_file},
    {"source_sha256", &M::source_sha256}};

void write_meta(hid_t f, const TokenFileMeta& m) {
  io::h5::write_attr(f, "format_version", kTokenFileVersion);
  for (const auto& [name, field] : kIntAttrs) io::h5::write_attr(f, name, m.*field);
  for (const auto& [name, field] : kStringAttrs) io::h5::write_attr(f, name, m.*field);
}

void read_meta(hid_t f, TokenFileMeta& m) {  // absent attributes keep their defaults
  for (const auto& [name, field] : kIntAttrs)
    if (io::h5::has_attr(f, name)) m.*field = io::h5::read_attr_int(f, name);
  for (const auto& [name, field] : kStringAttrs)
    if (io::h5::has_attr(f, name)) m.*field = io::h5::read_attr_string(f, name);
}

}  // namespace

void write_token_file(const std::string& path, const Rows& rows, TokenFileMeta meta,
                      const std::function<void()>& before_publish) {
  std::lock_guard<std::recursive_mutex> lock(io::h5::library_lock());
  meta.seq_len = rows.seq_len;
  meta.rows = rows.rows;
  meta.tokens = rows.tokens;
  meta.loss_tokens = rows.loss_tokens;
  meta.max_token_id = 0;
  for (int32_t t : rows.tokens_data) meta.max_token_id = std::max<int64_t>(meta.max_token_id, t);
  // PATH.tmp, renamed on success; a full disk or read-only directory is one line (exit 2).
  runtime::write_atomically(path, [&](const std::string& tmp) {
    io::h5::Handle f = io::h5::create_file(tmp);
    io::h5::write_matrix<int32_t>(f, "tokens", rows.tokens_data, rows.rows, rows.seq_len);
    io::h5::write_matrix<uint8_t>(f, "loss_mask", rows.mask_data, rows.rows, rows.seq_len);
    if (meta.packing == "packing")
      io::h5::write_matrix<int32_t>(f, "position_ids", rows.position_data, rows.rows, rows.seq_len);
    write_meta(f, meta);
    H5_CHECK(H5Fflush(f, H5F_SCOPE_GLOBAL));
    if (before_publish) before_publish();
  });
}

TokenFile::TokenFile(const std::string& path) : path_(path) {
  std::lock_guard<std::recursive_mutex> lock(io::h5::library_lock());
  file_ = io::h5::open_file(path);
  if (!io::h5::has_attr(file_, "format_version") || !io::h5::has_attr(file_, "seq_len"))
    throw runtime::UsageError(path +
                              " is not a shardtrain token file (no format_version/seq_len); make "
                              "it with 'shardtrain prepare'");
  const int64_t version = io::h5::read_attr_int(file_, "format_version");
  if (version > kTokenFileVersion)
    throw runtime::UsageError(path + " has token-file format " + std::to_string(version) +
                              ", newer than this build's " + std::to_string(kTokenFileVersion) +
                              "; upgrade shardtrain or re-run prepare");
  tokens_ = io::h5::open_dataset(file_, "tokens");
  mask_ = io::h5::open_dataset(file_, "loss_mask");
  using io::h5::Element;
  const std::string fix =
      "write it with 'shardtrain prepare', or as prepare does (integer /tokens, integer or bool "
      "/loss_mask, both [rows, seq_len])";
  const auto shape = io::h5::check_dataset(tokens_, path, "/tokens",
                                           {Element::kInteger, {-1, -1}, "[rows, seq_len]"}, fix);
  const std::vector<int64_t> same(shape.begin(), shape.end());
  const std::string like_tokens = io::h5::shape_text(shape) + " (that of /tokens)";
  io::h5::check_dataset(mask_, path, "/loss_mask", {Element::kIntegerOrBool, same, like_tokens},
                        fix);
  {
    io::h5::Handle type(H5_CHECK(H5Dget_type(tokens_)), H5Tclose);
    wide_tokens_ =
        H5Tget_size(type) > 4 || (H5Tget_size(type) == 4 && H5Tget_sign(type) == H5T_SGN_NONE);
  }
  read_meta(file_, meta_);
  meta_.rows = static_cast<int64_t>(shape[0]);  // the datasets, not the attributes, are the truth
  meta_.seq_len = static_cast<int64_t>(shape[1]);
  if (meta_.rows == 0) throw runtime::UsageError(path + " holds no rows");
  // A damaged shape would size every batch's buffers: no context window is a million tokens.
  if (meta_.seq_len <= 0 || meta_.seq_len > (int64_t{1} << 20))
    throw runtime::UsageError(path + ": rows of " + std::to_string(meta_.seq_len) +
                              " tokens; the file is damaged, re-run prepare");
  if (preference() && (meta_.rows % 2 != 0 || io::h5::has_dataset(file_, "position_ids")))
    throw runtime::UsageError(path +
                              " says it holds preference pairs but has an odd row count or packed "
                              "rows; the file is damaged, re-run 'shardtrain prepare'");
  if (io::h5::has_dataset(file_, "position_ids")) {
    positions_ = io::h5::open_dataset(file_, "position_ids");
    io::h5::check_dataset(positions_, path, "/position_ids", {Element::kInteger, same, like_tokens},
                          "the file is damaged or not prepare's; re-run 'shardtrain prepare'");
  } else if (meta_.packing == "packing") {
    runtime::log::warn_once(
        path +
        " was packed without document boundaries (an older prepare): its samples attend to the "
        "samples before them in a row; re-run 'shardtrain prepare' to train each sample on its "
        "own");
  }
}

int64_t rows_per_example(const TokenFileMeta& m) { return m.format == kPreferenceFormat ? 2 : 1; }

namespace {

// The first id of toks outside [0, limit), as a TokenAt in rows from `first`.
template <typename T>
TokenFile::TokenAt first_outside(const std::vector<T>& toks, int64_t limit, int64_t first,
                                 int64_t seq_len) {
  for (size_t i = 0; i < toks.size(); ++i)
    if (toks[i] < 0 || toks[i] >= limit)
      return {first + static_cast<int64_t>(i) / seq_len, static_cast<int64_t>(i) % seq_len,
              static_cast<int64_t>(toks[i])};
  return {};
}

}  // namespace

TokenFile::Scan TokenFile::scan(int64_t limit, int64_t begin, int64_t end) const {
  constexpr int64_t kBlockRows = 1024;  // 4 MiB of ids at seq_len 1024, and 1 MiB of mask
  Scan out;
  std::vector<int64_t> rows;
  for (int64_t b = begin; b < end; b += kBlockRows) {
    rows.resize(std::min(kBlockRows, end - b));
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = b + static_cast<int64_t>(i);
    std::vector<int32_t> toks;
    std::vector<int64_t> wide;
    std::vector<uint8_t> mask;
    try {
      std::lock_guard<std::recursive_mutex> lock(io::h5::library_lock());
      if (wide_tokens_)
        wide = io::h5::read_rows<int64_t>(tokens_, rows, meta_.seq_len);
      else
        toks = io::h5::read_rows<int32_t>(tokens_, rows, meta_.seq_len);
      mask = io::h5::read_rows<uint8_t>(mask_, rows, meta_.seq_len);
    } catch (const runtime::UsageError&) {
      throw;
    } catch (const runtime::Error& e) {
      throw runtime::UsageError(
          path_ + ": rows " + std::to_string(b) + ".." + std::to_string(b + rows.size() - 1) +
          " cannot be read; the file is damaged (re-run 'shardtrain prepare'): " + e.what());
    }
    out.outside = wide_tokens_ ? first_outside(wide, limit, b, meta_.seq_len)
                               : first_outside(toks, limit, b, meta_.seq_len);
    for (uint8_t m : mask) out.loss_tokens += m != 0;
    if (out.outside.row >= 0) return out;
  }
  return out;
}

model::Batch TokenFile::read(const std::vector<int64_t>& rows) const {
  for (int64_t r : rows)
    if (r < 0 || r >= meta_.rows)
      throw runtime::Error(path_ + ": row " + std::to_string(r) + " out of range");
  std::vector<int32_t> toks, pos;
  std::vector<uint8_t> mask;
  {
    std::lock_guard<std::recursive_mutex> lock(io::h5::library_lock());
    toks = io::h5::read_rows<int32_t>(tokens_, rows, meta_.seq_len);
    mask = io::h5::read_rows<uint8_t>(mask_, rows, meta_.seq_len);
    if (positions_.valid()) pos = io::h5::read_rows<int32_t>(positions_, rows, meta_.seq_len);
  }
  const int64_t b = static_cast<int64_t>(rows.size());
  model::Batch out;
  out.tokens = at::from_blob(toks.data(), {b, meta_.seq_len}, at::kInt).to(at::kLong);
  auto ignored =
      at::from_blob(mask.data(), {b, meta_.seq_len}, at::kByte).eq(0);  // outside the loss
  if (!pos.empty()) {
    out.positions = at::from_blob(pos.data(), {b, meta_.seq_len}, at::kInt).to(at::kLong);
    // A packed sample's first token would be predicted from the sample before it: no target, as
    // transformers' DataCollatorWithFlattening (files prepared before this rule included).
    ignored = ignored.logical_or(out.positions.eq(0));
  }
  out.labels = out.tokens.masked_fill(ignored, -100);
  return out;
}

}  // namespace shardtrain::data
