// A rendered conversation to ids and a loss mask, as transformers'
// apply_chat_template(tokenize=True) gives the ids, with the assistant turns (content and
// end-of-turn token) in the loss.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "shardtrain/data/chat_template.h"
#include "shardtrain/data/instruction.h"
#include "shardtrain/data/tokenizer.h"

namespace shardtrain::data {

struct ChatSample {
  Sample sample;
  std::vector<int64_t> turn_ends;  // token count after each assistant message's rendering
};

class ChatEncoder {
 public:
  // t resolved (not kAuto). enable_thinking false: Qwen3's (any other template throws UsageError).
  ChatEncoder(const Tokenizer& tok, ChatTemplate t, bool enable_thinking = true);
  // The text between the template's special tokens is tokenized run by run, as transformers
  // splits added tokens out first; inside a run, a turn starts at the token count of the text
  // before it when that tokenizes to a prefix of the run's ids (else their common prefix).
  // train_on_all: every token in the loss. add_generation_prompt: as apply_chat_template's.
  ChatSample encode(const std::vector<ChatMessage>& messages, bool train_on_all,
                    bool add_generation_prompt = false) const;
  ChatTemplate chat_template() const { return t_; }

 private:
  void strip_beside_specials(std::vector<ChatPiece>& pieces) const;
  int32_t special_id(const std::string& text) const;

  const Tokenizer& tok_;
  ChatTemplate t_;
  bool enable_thinking_;
  std::string bos_, eos_;
  mutable std::map<std::string, int32_t> special_ids_;
};

enum class ChatFit { kWhole, kCutAtTurn, kTruncated };
// Longer than seq_len: cut after the last assistant turn that fits, or, when not even the first
// fits, truncated to seq_len. turns_dropped: the assistant turns the cut left out.
ChatFit fit_chat(ChatSample& s, int64_t seq_len, int64_t* turns_dropped);

}  // namespace shardtrain::data
