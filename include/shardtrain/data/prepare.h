// `shardtrain prepare`: JSONL → tokenized, masked, packed or padded rows in HDF5 token files
// (/tokens [N, seq_len] int32, /loss_mask [N, seq_len] uint8, provenance in attributes).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "shardtrain/data/chat_template.h"
#include "shardtrain/data/instruction.h"
#include "shardtrain/data/token_file.h"
#include "shardtrain/data/tokenizer.h"

namespace shardtrain::data {

struct ReadStats {
  int64_t read = 0, skipped = 0, truncated = 0;
  int64_t cut_at_turn = 0,
          turns_dropped = 0;  // chat: dialogues cut after their last assistant turn that fits
  std::map<std::string, int64_t> skipped_by_reason;
  std::vector<std::string> examples;  // "file:line: reason (detail)" for the first few skips
};

struct ReadResult {
  std::vector<Sample> samples;  // kept, truncated to seq_len, in file order
  ReadStats stats;
  DataFormat format = DataFormat::kAuto;
  ChatTemplate chat_template =
      ChatTemplate::kAuto;  // the one chat records used (resolved at the first)
  std::string sha256;       // of the source file's bytes
};

// How chat records become samples: the template (kAuto: the tokenizer directory's, resolved at the
// first chat record) and --train-on all (every token in the loss, for every format).
struct ChatSettings {
  ChatTemplate chat_template = ChatTemplate::kAuto;
  bool train_on_all = false;
  bool enable_thinking = true;  // Qwen3's generation prompts (preference prompts)
};

// Blank lines are ignored; bad lines are skipped and counted, or with strict, the first one
// throws UsageError naming the line. A chat record that is wrong (ParsedLine::fatal) always throws.
ReadResult read_jsonl(const std::string& path, DataFormat format, const Tokenizer& tok,
                      int64_t seq_len, bool strict, size_t max_examples = 5,
                      const ChatSettings& chat = {});

// packing: whole samples (each at most seq_len, as read_jsonl truncates them) placed one after
// another, a new row whenever the next does not fit; positions restart at 0 with each sample, and
// the padded tail of a row continues its last sample's. So no sample is cut across rows and,
// with document masking in the model, a packed row trains what the samples one per row would.
// Padding: one sample per row, positions 0..seq_len-1.
Rows make_rows(const std::vector<Sample>& samples, int64_t seq_len, bool packing, int32_t pad_id);

// Which samples go to validation: a seeded choice of round(fraction * n), at least one each.
std::vector<bool> validation_choice(int64_t n, double fraction, uint64_t seed);

struct PrepareOptions {
  std::string tokenizer, input, output;
  DataFormat format = DataFormat::kAuto;
  ChatTemplate chat_template = ChatTemplate::kAuto;  // --chat-template
  bool train_on_all = false;                         // --train-on all
  bool enable_thinking = true;                       // Qwen3's; --no-thinking sets it false
  int64_t seq_len = 512;
  bool packing = true, strict = false;
  bool mode_given = false;  // --mode was passed (preference pairs refuse packing, not its default)
  double val_fraction = 0;  // > 0: hold out this share of the input
  std::string val_input;    // or: a second JSONL file for validation
  std::string val_output;   // default: <output without .h5>.val.h5
  uint64_t seed = 1234;
  int64_t show_bad = 5;
};

struct PrepareReport {
  ReadStats train_stats, val_stats;
  Rows train, val;
  std::string format, val_output;
  std::string chat_template;  // chat: the template used, and where it came from
  int64_t train_samples = 0, val_samples = 0;
  bool packing = true;  // as written: preference pairs are always padded
  bool pairs = false;   // preference: *_samples count pairs, two rows each
};

// The validation file to write: --val-output, else <output without .h5>.val.h5; "" without
// validation.
std::string val_output_path(const PrepareOptions& o);

// Writes the file(s) atomically, making missing directories: on any failure nothing is left at
// the output paths.
PrepareReport run_prepare(const PrepareOptions& o);
std::string format_report(const PrepareOptions& o, const PrepareReport& r);

}  // namespace shardtrain::data
