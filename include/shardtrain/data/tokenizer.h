// The one tokenizer every command uses: a SentencePiece .model (Llama-2) or a Hugging Face
// tokenizer.json of byte-level BPE (Llama-3, Qwen2), with the BOS/EOS/pad tokens its directory's
// tokenizer_config.json, special_tokens_map.json and generation_config.json name.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "shardtrain/data/tokenizer_config.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace shardtrain::data {

class AddedVocabulary;
class BpeTokenizer;

// The tokenizer file a --tokenizer path names: a .model or tokenizer.json file as given, or in a
// directory its tokenizer.json (preferred, as AutoTokenizer's fast tokenizer) else tokenizer.model.
// Throws UsageError naming the path and what to pass instead.
std::string resolve_tokenizer_file(const std::string& path);
bool is_tokenizer_json(
    const std::string& file);  // a resolved file: tokenizer.json rather than .model

class Tokenizer {
 public:
  explicit Tokenizer(
      const std::string& path);  // any path resolve_tokenizer_file takes; throws UsageError
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // add_bos: the special tokens the tokenizer adds itself, as transformers' add_special_tokens=True
  // (Llama-2's and Llama-3's BOS; nothing for Qwen2). add_eos: EOS appended after them, once.
  std::vector<int32_t> encode(const std::string& text, bool add_bos = true,
                              bool add_eos = false) const;
  // A run of text between two special tokens of a rendered chat (after_special: one precedes it),
  // as transformers tokenizes it: added tokens split out, SentencePiece's "▁" placed as
  // LlamaTokenizer's Metaspace places it (legacy, add_prefix_space).
  std::vector<int32_t> encode_run(const std::string& text, bool after_special) const;
  // The id of a token by its text (a piece, an added token); -1 when the tokenizer has none.
  int32_t token_id(const std::string& token) const;
  // Whether added token `id` takes the whitespace to its left and to its right (lstrip, rstrip).
  std::pair<bool, bool> strips(int32_t id) const;
  // Special tokens (BOS/EOS/pad, a tokenizer.json's special added tokens) are dropped, as
  // skip_special_tokens does.
  std::string decode(const std::vector<int32_t>& ids) const;

  int32_t bos_id() const { return bos_; }  // -1: the tokenizer has none (Qwen2)
  int32_t eos_id() const { return eos_; }
  int32_t pad_id() const { return pad_ >= 0 ? pad_ : eos_; }  // pad_token, else EOS
  // Where generation stops: generation_config.json's eos_token_id list (Llama-3-Instruct's two),
  // else EOS.
  const std::vector<int32_t>& stop_ids() const { return stop_ids_; }
  int32_t unk_id() const;
  std::string piece(int32_t id) const;  // "<s>", "Ġthe", "<|end_of_text|>"
  // Ids the tokenizer can produce: its largest id + 1, added tokens included.
  int32_t vocab_size() const { return vocab_; }
  bool is_json() const { return bpe_ != nullptr; }
  const std::string& path() const { return path_; }      // the tokenizer file
  const std::string& sha256() const { return sha256_; }  // of the tokenizer file's bytes
  // Throws UsageError naming the file when it has ids the model's vocab_size cannot look up. A
  // larger model vocabulary is fine: padded vocabularies are.
  void require_fits(int64_t model_vocab_size) const;

 private:
  void load_sentencepiece(const TokenizerConfig& cfg);
  void load_json(const TokenizerConfig& cfg);
  // The id of a token the config files name; throws UsageError naming file and key when the
  // tokenizer lacks it.
  int32_t special_id(const SpecialTokenName& name, const char* key) const;
  // One stretch of text between added tokens through SentencePiece, with or without its "▁"
  // (at_start: the stretch opens the text, which prepend_scheme "first" prefixes).
  std::vector<int32_t> encode_sp_run(const std::string& text, bool at_start) const;

  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_plain_;  // sp_ without its "▁" prefix
  std::unique_ptr<BpeTokenizer> bpe_;
  std::string path_, sha256_;
  int32_t bos_ = -1, eos_ = -1, pad_ = -1, vocab_ = 0, sp_pieces_ = 0;
  bool add_bos_token_ = true,
       add_eos_token_ = false;    // SentencePiece: tokenizer_config.json's flags
  bool suffix_has_eos_ = false;   // a tokenizer.json's post_processor already ends with EOS
  bool sp_dummy_prefix_ = false;  // the SentencePiece model puts "▁" before a text (not Gemma's)
  bool sp_hf_ = false;            // a tokenizer_config.json beside the model: transformers' rules
  bool sp_legacy_ = true;         // tokenizer_config.json's legacy ("▁" after added tokens too)
  bool sp_prefix_ = true;         // tokenizer_config.json's add_prefix_space
  bool split_special_ = false;    // tokenizer_config.json's split_special_tokens
  // tokenizer_config.json's added_tokens_decoder and its named special tokens
  std::unique_ptr<AddedVocabulary> sp_added_;
  std::vector<int32_t> stop_ids_;
};

}  // namespace shardtrain::data
