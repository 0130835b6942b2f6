#include "shardtrain/data/prepare.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "shardtrain/data/sampler.h"
#include "shardtrain/data/token_file.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/sha256.h"

namespace shardtrain::data {

ReadResult read_jsonl(const std::string& path, DataFormat format, const Tokenizer& tok, int64_t seq_len,
                      bool strict, size_t max_examples) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw runtime::UsageError("--input " + path + " cannot be opened");
  ReadResult res;
  res.sha256 = runtime::sha256_file(path);
  for_each_record(in, format, [&](int64_t lineno, ParsedLine& p) {
    ++res.stats.read;
    if (!p.ok) {
      const std::string where = path + ":" + std::to_string(lineno) + ": " + p.reason +
                                (p.detail.empty() ? "" : " (" + p.detail + ")");
      if (strict) throw runtime::UsageError(where + "; fix the line or drop --strict to skip bad lines");
      ++res.stats.skipped;
      ++res.stats.skipped_by_reason[p.reason];
      if (res.stats.examples.size() < max_examples) res.stats.examples.push_back(where);
      return true;
    }
    Sample s = tokenize_record(p.record, tok);
    if (static_cast<int64_t>(s.ids.size()) > seq_len) {
      s.ids.resize(seq_len);
      s.mask.resize(seq_len);
      ++res.stats.truncated;
    }
    res.samples.push_back(std::move(s));
    return true;
  });
  res.format = format;
  return res;
}

Rows make_rows(const std::vector<Sample>& samples, int64_t seq_len, bool packing, int32_t pad_id) {
  Rows r;
  r.seq_len = seq_len;
  auto new_row = [&] {
    r.tokens_data.resize(r.tokens_data.size() + seq_len, pad_id);
    r.mask_data.resize(r.mask_data.size() + seq_len, 0);
    ++r.rows;
  };
  int64_t col = seq_len;  // column in the current row; seq_len means "row full"
  for (const Sample& s : samples) {
    if (!packing) col = seq_len;
    for (size_t i = 0; i < s.ids.size(); ++i) {
      if (col == seq_len) {
        new_row();
        col = 0;
      }
      const size_t at = static_cast<size_t>((r.rows - 1) * seq_len + col++);
      r.tokens_data[at] = s.ids[i];
      r.mask_data[at] = s.mask[i];
      ++r.tokens;
      r.loss_tokens += s.mask[i];
    }
  }
  return r;
}

std::vector<bool> validation_choice(int64_t n, double fraction, uint64_t seed) {
  std::vector<bool> val(n, false);
  if (fraction <= 0 || n < 2) return val;
  const int64_t k = std::clamp<int64_t>(std::llround(fraction * static_cast<double>(n)), 1, n - 1);
  const auto perm = epoch_permutation(n, seed, /*epoch=*/-1);  // -1: never a training epoch's order
  for (int64_t i = 0; i < k; ++i) val[perm[i]] = true;
  return val;
}

namespace {

// The outputs' missing directories are made, as train makes its own.
void make_parent(const char* opt, const std::string& path) {
  const auto dir = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  if (ec) throw runtime::UsageError(std::string(opt) + ": cannot write " + path + ": " + ec.message());
}

TokenFileMeta meta_for(const PrepareOptions& o, const Tokenizer& tok, const ReadResult& r, const std::string& source,
                       const char* split, int64_t samples) {
  TokenFileMeta m;
  m.samples = samples;
  m.samples_read = r.stats.read;
  m.samples_skipped = r.stats.skipped;
  m.samples_truncated = r.stats.truncated;
  m.skip_reasons_json = nlohmann::json(r.stats.skipped_by_reason).dump();
  m.pad_id = tok.pad_id();
  m.packing = o.packing ? "packing" : "padding";
  m.format = format_name(r.format);
  m.split = split;
  m.tokenizer_sha256 = tok.sha256();
  m.tokenizer_vocab_size = tok.vocab_size();
  m.source_file = std::filesystem::absolute(source).string();
  m.source_sha256 = r.sha256;
  return m;
}

void require_samples(const std::string& path, const ReadResult& r) {
  if (!r.samples.empty()) return;
  std::ostringstream os;
  os << "no usable samples in " << path << ": read " << r.stats.read << ", skipped " << r.stats.skipped;
  for (const auto& [reason, n] : r.stats.skipped_by_reason) os << " (" << reason << ": " << n << ")";
  if (!r.stats.examples.empty()) os << "; first: " << r.stats.examples.front();
  throw runtime::UsageError(os.str());
}

}  // namespace

std::string val_output_path(const PrepareOptions& o) {
  if (o.val_fraction <= 0 && o.val_input.empty()) return "";
  if (!o.val_output.empty()) return o.val_output;
  const std::filesystem::path p(o.output);
  return (p.parent_path() / (p.stem().string() + ".val" + p.extension().string())).string();
}

PrepareReport run_prepare(const PrepareOptions& o) {
  Tokenizer tok(o.tokenizer);
  PrepareReport rep;
  ReadResult train = read_jsonl(o.input, o.format, tok, o.seq_len, o.strict, o.show_bad);
  require_samples(o.input, train);
  rep.format = format_name(train.format);
  rep.train_stats = train.stats;
  rep.val_output = val_output_path(o);
  const bool want_val = !rep.val_output.empty();
  std::vector<Sample> train_samples, val_samples;
  ReadResult val;
  if (!o.val_input.empty()) {
    val = read_jsonl(o.val_input, train.format, tok, o.seq_len, o.strict, o.show_bad);
    require_samples(o.val_input, val);
    rep.val_stats = val.stats;
    train_samples = std::move(train.samples);
    val_samples = std::move(val.samples);
  } else {
    const auto is_val = validation_choice(static_cast<int64_t>(train.samples.size()), o.val_fraction, o.seed);
    for (size_t i = 0; i < train.samples.size(); ++i)
      (is_val[i] ? val_samples : train_samples).push_back(std::move(train.samples[i]));
  }
  rep.train_samples = static_cast<int64_t>(train_samples.size());
  rep.val_samples = static_cast<int64_t>(val_samples.size());
  rep.train = make_rows(train_samples, o.seq_len, o.packing, tok.pad_id());
  if (want_val) rep.val = make_rows(val_samples, o.seq_len, o.packing, tok.pad_id());
  const auto& val_src = o.val_input.empty() ? train : val;
  make_parent("--output", o.output);
  if (want_val) make_parent("--val-output", rep.val_output);
  // Both files appear, or neither: the validation file is removed if the train file fails.
  if (want_val)
    write_token_file(rep.val_output, rep.val,
                     meta_for(o, tok, val_src, o.val_input.empty() ? o.input : o.val_input, "validation", rep.val_samples));
  try {
    write_token_file(o.output, rep.train, meta_for(o, tok, train, o.input, "train", rep.train_samples));
  } catch (...) {
    std::error_code ec;
    if (want_val) std::filesystem::remove(rep.val_output, ec);
    throw;
  }
  return rep;
}

std::string format_report(const PrepareOptions& o, const PrepareReport& r) {
  std::ostringstream os;
  auto stats = [&](const char* what, const std::string& file, const ReadStats& s) {
    os << what << " " << file << ": read " << s.read << " | skipped " << s.skipped;
    std::string sep = " (";
    for (const auto& [reason, n] : s.skipped_by_reason) {
      os << sep << reason << " " << n;
      sep = ", ";
    }
    if (!s.skipped_by_reason.empty()) os << ")";
    os << " | truncated to " << o.seq_len << ": " << s.truncated << "\n";
    for (const auto& e : s.examples) os << "  skipped " << e << "\n";
  };
  auto rows = [&](const char* what, const std::string& file, int64_t samples, const Rows& x) {
    os << what << " " << file << ": " << samples << " samples -> " << x.rows << " rows x " << x.seq_len << " ("
       << (o.packing ? "packed" : "padded") << "), " << x.tokens << " tokens, " << x.loss_tokens << " in the loss\n";
  };
  os << "format " << r.format << "\n";
  stats("input", o.input, r.train_stats);
  if (!o.val_input.empty()) stats("validation input", o.val_input, r.val_stats);
  rows("train", o.output, r.train_samples, r.train);
  if (!r.val_output.empty()) rows("validation", r.val_output, r.val_samples, r.val);
  return os.str();
}

}  // namespace shardtrain::data
