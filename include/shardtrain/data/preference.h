// Preference pairs (DPO): records with a prompt and a chosen and a rejected answer, as strings or
// in TRL's conversational form, tokenized the way TRL's DPOTrainer tokenizes them, into two
// samples (prompt + chosen, prompt + rejected) with the loss mask on the answer only.
#pragma once

#include <memory>
#include <string>

#include "shardtrain/data/chat_template.h"
#include "shardtrain/data/chat_tokenize.h"
#include "shardtrain/data/instruction.h"

namespace shardtrain::data {

struct PreferencePair {
  Sample chosen, rejected;  // prompt + answer each, the mask on the answer
  int64_t prompt_tokens = 0;
};

// TRL's DPOTrainer: the prompt alone and prompt + answer are tokenized whole (strings with the
// tokenizer's special tokens, an EOS appended to each answer; conversations with the chat
// template, the prompt with its generation prompt), and the answer starts where the prompt's ids
// and both answers' ids first differ.
class PreferenceEncoder {
 public:
  // t: the chat template for conversational records (resolved, not kAuto), or kAuto for strings.
  PreferenceEncoder(const Tokenizer& tok, ChatTemplate t, bool enable_thinking = true);
  PreferencePair encode(const Record& r) const;

 private:
  std::vector<int32_t> encode_answer(const std::string& prompt, const std::string& answer) const;
  const Tokenizer& tok_;
  std::unique_ptr<ChatEncoder> chat_;  // conversational records: t's encoder; null for kAuto
  std::string eos_text_;
  bool appends_eos_ = false;  // the tokenizer adds an EOS itself (add_eos_token)
};

}  // namespace shardtrain::data
