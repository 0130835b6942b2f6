// tokenizer.json's added_tokens: split out of the text before the pre-tokenizer (tokenizers'
// AddedVocabulary), leftmost-longest, honouring single_word, lstrip, rstrip and normalized.
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "shardtrain/data/bpe_model.h"
#include "shardtrain/data/pre_tokenizer.h"
#include "shardtrain/data/tokenizer_config.h"
#include "shardtrain/data/tokenizer_json_fields.h"

namespace shardtrain::data {

// A stretch of the text: an added token's id, or (id -1) text for the pre-tokenizer.
struct TextSegment {
  std::string text;
  int32_t id = -1;
};

class AddedVocabulary {
 public:
  // Ids are assigned as tokenizers assigns them: the model's id for a token it knows, else the next
  // free one.
  AddedVocabulary(const nlohmann::json& tokens, const BpeModel& model,
                  const TextNormalizer& normalizer, const JsonSpot& spot);
  // A SentencePiece model's added tokens (tokenizer_config.json's added_tokens_decoder, its ids as
  // given), matched in the text as given: transformers' Llama tokenizer has no normalizer.
  explicit AddedVocabulary(const std::map<int32_t, AddedTokenEntry>& tokens);

  // The text cut at added tokens, normalized between them; split_special: special tokens stay text.
  std::vector<TextSegment> split(std::string_view text, const TextNormalizer& normalizer,
                                 bool split_special) const;
  // The same without a normalizer (the SentencePiece constructor's tokens).
  std::vector<TextSegment> split(std::string_view text, bool split_special) const;

  int32_t token_to_id(const std::string& content) const;  // -1 when no added token has it
  const std::string* id_to_token(int32_t id) const;       // the form the decoder sees
  bool is_special(const std::string& token) const { return special_.count(token) > 0; }
  std::pair<bool, bool> strips(int32_t id) const;  // lstrip, rstrip; false for other ids
  int32_t max_id() const { return max_id_; }

 private:
  struct Token {
    std::string content, match;  // match: content, or its normalized form for normalized tokens
    int32_t id;
    bool single_word, lstrip, rstrip, normalized, special;
  };
  // A byte trie over the tokens' match strings, for leftmost-longest matching.
  struct Trie {
    std::vector<std::unordered_map<unsigned char, int32_t>> next{1};
    std::vector<int32_t> token{-1};  // index into tokens_ ending at the node
    void insert(const std::string& s, int32_t index);
    bool empty() const { return next.size() == 1; }
  };
  void add(Token tok);  // by id: a later entry replaces an earlier one, as tokenizers' map does
  void cut(std::string_view text, const Trie& trie, bool split_special,
           std::vector<TextSegment>* out) const;

  std::vector<Token> tokens_;
  std::unordered_map<std::string, int32_t> by_content_;
  std::unordered_map<int32_t, size_t> by_id_;
  std::set<std::string> special_;
  Trie raw_, normalized_;  // tokens matched before normalization, and after
  int32_t max_id_ = -1;
};

}  // namespace shardtrain::data
