// A Hugging Face tokenizer.json of byte-level BPE (Llama-3, Qwen2, GPT-2), encoded and decoded in
// C++ exactly as the tokenizers library does: added tokens split out first, then the normalizer,
// the pre-tokenizer and the BPE model; the post_processor's special tokens on request; the
// ByteLevel decoder. Anything else that would change the ids is refused when the file is read.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "shardtrain/data/added_vocabulary.h"
#include "shardtrain/data/bpe_model.h"
#include "shardtrain/data/pre_tokenizer.h"

namespace shardtrain::data {

class BpeTokenizer {
 public:
  // Throws UsageError with one line naming the file and the field it refuses.
  explicit BpeTokenizer(const std::string& path);

  // with_special: the post_processor's tokens (transformers' add_special_tokens=True).
  std::vector<int32_t> encode(std::string_view text, bool with_special) const;
  // Unknown ids are dropped, as tokenizers drops them; skip_special drops the special added tokens.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special) const;

  int32_t token_to_id(const std::string& token) const;  // added tokens first; -1 when absent
  std::string id_to_token(int32_t id) const;            // "" when absent
  int32_t vocab_size() const;                           // the largest id + 1, added tokens included
  const std::vector<int32_t>& special_suffix() const {
    return suffix_;
  }  // what with_special appends
  int32_t unk_id() const { return model_.unk_id(); }
  std::pair<bool, bool> strips(int32_t id) const { return added_.strips(id); }
  // transformers' split_special_tokens: special-token text in the input is tokenized as text.
  void set_split_special_tokens(bool v) { split_special_ = v; }

 private:
  BpeTokenizer(const std::string& path, const nlohmann::json& j);
  void read_post_processor(const nlohmann::json& j, const JsonSpot& spot);

  std::string path_;
  TextNormalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  BpeModel model_;
  AddedVocabulary added_;
  std::vector<int32_t> prefix_, suffix_;  // the post_processor's tokens around the text
  bool byte_level_decoder_ = false;       // false: tokens joined by spaces (decoder null)
  bool split_special_ = false;
};

}  // namespace shardtrain::data
