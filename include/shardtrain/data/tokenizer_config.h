// The special tokens a model directory names, read as transformers reads them:
// tokenizer_config.json, special_tokens_map.json (only when the config has no added_tokens_decoder,
// whose entries it then overrides), and generation_config.json's ids for a BOS or EOS named nowhere
// else.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace shardtrain::data {

struct SpecialTokenName {
  enum class State { kAbsent, kNull, kSet };  // kNull: named as null (Qwen2's bos_token: no BOS)
  State state = State::kAbsent;
  std::string content;  // kSet: the token's text ("<|begin_of_text|>")
  std::string file;     // where it was named, for messages
  bool set() const { return state == State::kSet; }
};

// An added_tokens_decoder entry: its text, whether it takes the whitespace beside it, matches only
// whole words, is looked for in normalized text, and is special (tokenizers' AddedToken).
struct AddedTokenEntry {
  std::string content;
  bool lstrip = false, rstrip = false, single_word = false, normalized = false, special = false;
};

struct TokenizerConfig {
  bool has_config = false;  // tokenizer_config.json is present: transformers' rules apply
  SpecialTokenName bos, eos, pad, unk;
  std::optional<bool> add_bos_token,
      add_eos_token;                  // tokenizer_config.json's; SentencePiece honours them
  bool split_special_tokens = false;  // special-token text in the input stays text
  std::map<int32_t, AddedTokenEntry> added_tokens;  // added_tokens_decoder, by id
  // LlamaTokenizer's legacy flag: false puts SentencePiece's "▁" before the text's first run only,
  // none after a special token (transformers' Metaspace prepend_scheme "first").
  std::optional<bool> legacy;
  // LlamaTokenizer's add_prefix_space: false puts no "▁" before any text (prepend_scheme "never").
  std::optional<bool> add_prefix_space;
  int32_t generation_bos = -1,
          generation_eos = -1;  // generation_config.json's (the first of a list); -1: none
  std::vector<int32_t> generation_eos_ids;  // generation_config.json's eos_token_id, every one
};

// Reads the files present in dir (none present: all absent). A file that is not JSON, or a token
// given as anything but a string, {"content": ...} or null, throws UsageError naming file and key.
TokenizerConfig read_tokenizer_config(const std::string& dir);

}  // namespace shardtrain::data
