#include "shardtrain/data/prepare.h"

#include <algorithm>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "shardtrain/data/chat_tokenize.h"
#include "shardtrain/data/preference.h"
#include "shardtrain/data/sampler.h"
#include "shardtrain/data/token_file.h"
#include "shardtrain/runtime/counted.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/sha256.h"

namespace shardtrain::data {

namespace {
// A sample whose every loss token fell past --seq-len: it would train nothing.
const char* const kAnswerCut = "answer cut away by --seq-len";
}  // namespace

ReadResult read_jsonl(const std::string& path, DataFormat format, const Tokenizer& tok,
                      int64_t seq_len, bool strict, size_t max_examples, const ChatSettings& chat) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw runtime::UsageError("--input " + path + " cannot be opened");
  ReadResult res;
  res.sha256 = runtime::sha256_file(path);
  res.chat_template = chat.chat_template;
  std::unique_ptr<ChatEncoder>
      chat_encoder;  // made at the first chat record: auto reads the template then
  // Keeps s, or drops it and counts it when truncation left no token in its loss.
  auto keep = [&](Sample s, bool had_loss, int64_t lineno) {
    if (had_loss && std::count(s.mask.begin(), s.mask.end(), uint8_t{1}) == 0) {
      ++res.stats.skipped;
      ++res.stats.skipped_by_reason[kAnswerCut];
      if (res.stats.examples.size() < max_examples)
        res.stats.examples.push_back(path + ":" + std::to_string(lineno) + ": " + kAnswerCut);
      return;
    }
    res.samples.push_back(std::move(s));
  };
  std::unique_ptr<PreferenceEncoder> preference;  // made at the first preference record
  // A pair is kept whole, chosen then rejected, or skipped whole; TRL's rule: the answers are
  // cut to seq_len, and a pair whose prompt alone fills it is dropped.
  auto keep_pair = [&](PreferencePair pair, int64_t lineno) {
    if (pair.prompt_tokens >= seq_len) {
      keep(Sample{}, true, lineno);  // counted as the answer cut away
      return;
    }
    bool cut = false;
    for (Sample* s : {&pair.chosen, &pair.rejected})
      if (static_cast<int64_t>(s->ids.size()) > seq_len) {
        s->ids.resize(seq_len);
        s->mask.resize(seq_len);
        cut = true;
      }
    res.stats.truncated += cut;
    res.samples.push_back(std::move(pair.chosen));
    res.samples.push_back(std::move(pair.rejected));
  };
  for_each_record(in, format, [&](int64_t lineno, ParsedLine& p) {
    ++res.stats.read;
    if (!p.ok) {
      const std::string where = path + ":" + std::to_string(lineno) + ": " + p.reason +
                                (p.detail.empty() ? "" : " (" + p.detail + ")");
      if (p.fatal) throw runtime::UsageError(where);
      if (strict)
        throw runtime::UsageError(where + "; fix the line or drop --strict to skip bad lines");
      ++res.stats.skipped;
      ++res.stats.skipped_by_reason[p.reason];
      if (res.stats.examples.size() < max_examples) res.stats.examples.push_back(where);
      return true;
    }
    if (format == DataFormat::kPreference) {
      if (!preference) {
        if (!p.record.messages.empty() && res.chat_template == ChatTemplate::kAuto)
          res.chat_template = detect_chat_template(tok.path());
        preference =
            std::make_unique<PreferenceEncoder>(tok, res.chat_template, chat.enable_thinking);
      }
      keep_pair(preference->encode(p.record), lineno);
      return true;
    }
    if (format == DataFormat::kChat) {
      if (!chat_encoder) {
        if (res.chat_template == ChatTemplate::kAuto)
          res.chat_template = detect_chat_template(tok.path());
        chat_encoder = std::make_unique<ChatEncoder>(tok, res.chat_template, chat.enable_thinking);
      }
      ChatSample c = chat_encoder->encode(p.record.messages, chat.train_on_all);
      const bool had_loss = std::count(c.sample.mask.begin(), c.sample.mask.end(), 1) > 0;
      int64_t dropped = 0;
      const ChatFit fit = fit_chat(c, seq_len, &dropped);
      res.stats.cut_at_turn += fit == ChatFit::kCutAtTurn;
      res.stats.turns_dropped += dropped;
      res.stats.truncated += fit == ChatFit::kTruncated;
      keep(std::move(c.sample), had_loss, lineno);
      return true;
    }
    Sample s = tokenize_record(p.record, tok);
    if (chat.train_on_all) s.mask.assign(s.ids.size(), 1);
    const bool had_loss = std::count(s.mask.begin(), s.mask.end(), 1) > 0;
    if (static_cast<int64_t>(s.ids.size()) > seq_len) {
      s.ids.resize(seq_len);
      s.mask.resize(seq_len);
      ++res.stats.truncated;
    }
    keep(std::move(s), had_loss, lineno);
    return true;
  });
  res.format = format;
  return res;
}

Rows make_rows(const std::vector<Sample>& samples, int64_t seq_len, bool packing, int32_t pad_id) {
  Rows r;
  r.seq_len = seq_len;
  int64_t col = seq_len;   // column in the current row; seq_len means "row full"
  auto finish_row = [&] {  // the padded tail continues the row's last positions
    const size_t row = static_cast<size_t>((r.rows - 1) * seq_len);
    for (int64_t c = col; c < seq_len && c > 0; ++c)
      r.position_data[row + c] = r.position_data[row + c - 1] + 1;
  };
  for (const Sample& s : samples) {
    const int64_t n = static_cast<int64_t>(s.ids.size());
    if (n == 0) continue;
    if (!packing || col + n > seq_len) {
      if (r.rows > 0) finish_row();
      r.tokens_data.resize(r.tokens_data.size() + seq_len, pad_id);
      r.mask_data.resize(r.mask_data.size() + seq_len, 0);
      r.position_data.resize(r.position_data.size() + seq_len, 0);
      ++r.rows;
      col = 0;
    }
    for (int64_t i = 0; i < n && col < seq_len; ++i) {
      const size_t at = static_cast<size_t>((r.rows - 1) * seq_len + col++);
      r.tokens_data[at] = s.ids[i];
      // A sample's first token is predicted from nothing of its own (TokenFile::read drops it too).
      const uint8_t in_loss = i == 0 ? 0 : s.mask[i];
      r.mask_data[at] = in_loss;
      r.position_data[at] = static_cast<int32_t>(i);
      ++r.tokens;
      r.loss_tokens += in_loss;
    }
  }
  if (r.rows > 0) finish_row();
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
  if (ec)
    throw runtime::UsageError(std::string(opt) + ": cannot write " + path + ": " + ec.message());
}

TokenFileMeta meta_for(const PrepareOptions& o, const Tokenizer& tok, const ReadResult& r,
                       const std::string& source, const char* split, int64_t samples) {
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
  os << "no usable samples in " << path << ": read " << r.stats.read << ", skipped "
     << r.stats.skipped;
  for (const auto& [reason, n] : r.stats.skipped_by_reason)
    os << " (" << reason << ": " << n << ")";
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

PrepareReport run_prepare(const PrepareOptions& given) {
  Tokenizer tok(given.tokenizer);
  PrepareReport rep;
  ReadResult train =
      read_jsonl(given.input, given.format, tok, given.seq_len, given.strict, given.show_bad,
                 {given.chat_template, given.train_on_all, given.enable_thinking});
  require_samples(given.input, train);
  // Preference pairs are one row each, chosen then rejected: a pair never shares a row or splits.
  const bool pairs = train.format == DataFormat::kPreference;
  if (pairs && given.train_on_all)
    throw runtime::UsageError(
        "--train-on all: preference pairs train on their answers only (DPO compares the answers' "
        "log-probabilities); drop --train-on");
  if (pairs && given.packing && given.mode_given)
    throw runtime::UsageError(
        "--mode packing: preference pairs are one row each (chosen, then rejected), so that a pair "
        "stays together; use --mode padding");
  PrepareOptions o = given;
  o.packing = o.packing && !pairs;
  rep.packing = o.packing;
  rep.format = format_name(train.format);
  if (train.format == DataFormat::kChat ||
      (pairs && train.chat_template != ChatTemplate::kAuto))  // conversational pairs
    rep.chat_template =
        std::string(chat_template_name(train.chat_template)) +
        (o.chat_template == ChatTemplate::kAuto ? " (from the tokenizer's chat_template)" : "");
  rep.train_stats = train.stats;
  rep.val_output = val_output_path(o);
  const bool want_val = !rep.val_output.empty();
  std::vector<Sample> train_samples, val_samples;
  ReadResult val;
  if (!o.val_input.empty()) {
    val = read_jsonl(o.val_input, train.format, tok, o.seq_len, o.strict, o.show_bad,
                     {train.chat_template, o.train_on_all, o.enable_thinking});
    require_samples(o.val_input, val);
    rep.val_stats = val.stats;
    train_samples = std::move(train.samples);
    val_samples = std::move(val.samples);
  } else {
    const size_t per = pairs ? 2 : 1;  // a pair is held out whole
    const auto is_val =
        validation_choice(static_cast<int64_t>(train.samples.size() / per), o.val_fraction, o.seed);
    for (size_t i = 0; i < train.samples.size(); ++i)
      (is_val[i / per] ? val_samples : train_samples).push_back(std::move(train.samples[i]));
  }
  rep.pairs = pairs;
  rep.train_samples = static_cast<int64_t>(train_samples.size() / (pairs ? 2 : 1));
  rep.val_samples = static_cast<int64_t>(val_samples.size() / (pairs ? 2 : 1));
  rep.train = make_rows(train_samples, o.seq_len, o.packing, tok.pad_id());
  if (want_val) rep.val = make_rows(val_samples, o.seq_len, o.packing, tok.pad_id());
  // A file without a loss token trains at loss 0 and learns nothing: refuse it here.
  for (const auto& [rows, file] :
       {std::pair{&rep.train, o.output}, std::pair{&rep.val, rep.val_output}})
    if (rows->rows > 0 && rows->loss_tokens == 0)
      throw runtime::UsageError(
          file +
          " would hold no token in the loss (every sample's loss mask is empty); check --format "
          "and --train-on, or raise --seq-len if answers are cut away");
  const auto& val_src = o.val_input.empty() ? train : val;
  make_parent("--output", o.output);
  if (want_val) make_parent("--val-output", rep.val_output);
  // Both files appear, or neither (earlier ones stay): the validation file is written and renamed
  // once the train file is complete and before it is renamed, so a failure or a kill while either
  // is written leaves both as they were; only a kill between the two renames splits them.
  const auto write_val = [&] {
    write_token_file(rep.val_output, rep.val,
                     meta_for(o, tok, val_src, o.val_input.empty() ? o.input : o.val_input,
                              "validation", rep.val_samples));
  };
  write_token_file(o.output, rep.train,
                   meta_for(o, tok, train, o.input, "train", rep.train_samples),
                   want_val ? std::function<void()>(write_val) : std::function<void()>());
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
    os << " | truncated to " << o.seq_len << ": " << s.truncated;
    if (s.skipped_by_reason.count(kAnswerCut))
      os << " | raise --seq-len to keep the samples whose answer it cut away";
    if (!r.chat_template.empty() && !r.pairs)  // a pair's answer is one turn: never cut at one
      os << " | dialogues cut at a turn boundary: " << s.cut_at_turn << " ("
         << runtime::counted(s.turns_dropped, "assistant turn") << " dropped)";
    os << "\n";
    for (const auto& e : s.examples) os << "  skipped " << e << "\n";
    if (s.skipped > static_cast<int64_t>(s.examples.size()))
      os << "  ... and " << s.skipped - static_cast<int64_t>(s.examples.size())
         << " more skipped (--show-bad N names up to N)\n";
  };
  auto rows = [&](const char* what, const std::string& file, int64_t samples, const Rows& x) {
    os << what << " " << file << ": " << runtime::counted(samples, r.pairs ? "pair" : "sample")
       << " -> " << runtime::counted(x.rows, "row") << " x " << x.seq_len << " ("
       << (r.packing ? "packed" : "padded") << "), " << x.tokens << " tokens, " << x.loss_tokens
       << " in the loss\n";
  };
  os << "format " << r.format
     << (o.format == DataFormat::kAuto ? " (detected from the first record)" : "");
  if (!r.chat_template.empty())
    os << ", chat template " << r.chat_template << ", loss on "
       << (o.train_on_all ? "every token"
           : r.pairs      ? "the answers"
                          : "the assistant turns");
  else if (r.pairs)
    os << ", loss on the answers (each pair: a chosen row, then its rejected row)";
  os << "\n";
  stats("input", o.input, r.train_stats);
  if (!o.val_input.empty()) stats("validation input", o.val_input, r.val_stats);
  rows("train", o.output, r.train_samples, r.train);
  if (!r.val_output.empty()) rows("validation", r.val_output, r.val_samples, r.val);
  return os.str();
}

}  // namespace shardtrain::data
