// Llama-2's tokenizer: a SentencePiece model loaded through libsentencepiece. Like Hugging Face's
// LlamaTokenizer, encode() prepends BOS and appends no EOS unless asked.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace shardtrain::data {

class Tokenizer {
 public:
  explicit Tokenizer(const std::string& model_path);  // throws UsageError naming the file
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  std::vector<int32_t> encode(const std::string& text, bool add_bos = true, bool add_eos = false) const;
  // Special tokens (BOS/EOS/pad) are dropped, as skip_special_tokens does.
  std::string decode(const std::vector<int32_t>& ids) const;

  int32_t bos_id() const { return bos_; }
  int32_t eos_id() const { return eos_; }
  int32_t unk_id() const;
  std::string piece(int32_t id) const;  // "<s>", "</s>", "<unk>" for Llama-2's special ids
  int32_t vocab_size() const { return vocab_; }
  const std::string& path() const { return path_; }
  const std::string& sha256() const { return sha256_; }  // of the model file's bytes
  // Throws UsageError naming the file when it has more pieces than the model's vocab_size (ids
  // the embedding cannot look up). A larger model vocabulary is fine: padded vocabularies are.
  void require_fits(int64_t model_vocab_size) const;

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::string path_, sha256_;
  int32_t bos_ = 1, eos_ = 2, vocab_ = 0;
};

}  // namespace shardtrain::data
