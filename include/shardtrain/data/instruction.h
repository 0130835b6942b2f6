// Instruction-tuning records from JSONL (alpaca, samsum, plain text, chat), with llama-recipes'
// prompt templates, tokenized into ids plus a loss mask that hides the prompt. Chat records are
// tokenized by ChatEncoder (chat_tokenize.h), with the model family's chat template.
#pragma once
#include <cstdint>
#include <functional>
#include <istream>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "shardtrain/data/chat.h"
#include "shardtrain/data/tokenizer.h"
#include "shardtrain/runtime/enum_names.h"

namespace shardtrain::data {

enum class DataFormat { kAuto, kAlpaca, kSamsum, kText, kChat, kPreference };
inline constexpr runtime::EnumName<DataFormat> kDataFormatNames[] = {
    {DataFormat::kAlpaca, "alpaca"},
    {DataFormat::kSamsum, "samsum"},
    {DataFormat::kText, "text"},
    {DataFormat::kChat, "chat"},
    {DataFormat::kPreference, "preference"},
    {DataFormat::kAuto, "auto"}};
DataFormat parse_format(const std::string& s);  // throws UsageError naming --format
const char* format_name(DataFormat f);

// llama-recipes' templates (alpaca_dataset.py's PROMPT_DICT, samsum_dataset.py).
std::string alpaca_prompt(const std::string& instruction, const std::string& input);
std::string samsum_prompt(const std::string& dialogue);

struct Record {
  std::string prompt;  // masked out of the loss; empty for plain text
  std::string answer;  // the trained-on part (the whole text for kText)
  bool joint = false;  // alpaca: tokenize prompt + answer as one string, as alpaca_dataset.py does
  std::vector<ChatMessage> messages;  // kChat: the conversation (prompt and answer stay empty)
  // kPreference (preference.h): the two answers to prompt (strings), or to messages (TRL's
  // conversational form: lists of assistant messages).
  std::string chosen, rejected;
  std::vector<ChatMessage> chosen_messages, rejected_messages;
};

struct ParsedLine {
  bool ok = false;
  std::string reason;  // skip reason: "invalid UTF-8", "malformed JSON", "missing field", ...
  std::string detail;  // e.g. which field, or the JSON parser's message
  bool fatal = false;  // a chat record prepare refuses (exit 2) rather than skips: chat.h
  Record record;
};

// Preference records (preference.cpp): true when a record holds "chosen" and "rejected" (for
// --format auto). parse_preference reads {"prompt", "chosen", "rejected"} into p.record: all three
// strings (prompt, chosen, rejected), or TRL's conversational form: "prompt" a list of messages
// ending with a user turn, "chosen" and "rejected" lists of assistant messages (messages,
// chosen_messages, rejected_messages). A missing field, an empty prompt or answer, or identical
// answers fill p's skip reason; a conversation in the wrong role order is fatal, as chat's.
bool is_preference_record(const nlohmann::json& record);
bool parse_preference(const nlohmann::json& j, ParsedLine& p);

// Parses one non-blank JSONL line. A kAuto format is resolved from the first JSON object's
// keys and written back, so the rest of the file is held to the same format.
ParsedLine parse_line(const std::string& line, DataFormat& format);

// The reading loop. JSONL: each line of `in`, less a trailing \r, that is not empty or only
// spaces and tabs goes through parse_line and then to fn(line_number, parsed), 1-based. A file
// whose first non-space byte is '[' is one JSON array instead (alpaca_data.json): each element
// goes through parse_line, with the line it starts on. fn returns false to stop. The caller
// opens the file, so its error names the right option.
void for_each_record(std::istream& in, DataFormat& format,
                     const std::function<bool(int64_t, ParsedLine&)>& fn);

// The records of a JSONL file that parse, in file order, bad lines skipped; at most `limit`
// (<= 0: all). Used for exact-match evaluation, where the answer must stay text.
std::vector<Record> read_records(const std::string& path, DataFormat& format, int64_t limit);

struct Sample {
  std::vector<int32_t> ids;   // [len]
  std::vector<uint8_t> mask;  // [len], 1 where the token is a training target
};

// [BOS] + prompt + answer + [EOS]; the mask covers the answer and EOS (and, for plain text,
// every token, BOS included, since a packed BOS is a real prediction target). Like
// llama-recipes, alpaca encodes prompt + answer together and masks len(encode(prompt)) tokens;
// samsum encodes the two separately.
Sample tokenize_record(const Record& r, const Tokenizer& tok);

}  // namespace shardtrain::data
