// tokenizer.json's "model" of type BPE: vocabulary, ranked merges, ignore_merges (Llama-3),
// unk_token with fuse_unk, and byte_fallback, as tokenizers' models/bpe/model.rs applies them.
#pragma once
#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "shardtrain/data/tokenizer_json_fields.h"

namespace shardtrain::data {

class BpeModel {
 public:
  // Refuses, naming the field: another model type, dropout, continuing_subword_prefix,
  // end_of_word_suffix, an unk_token outside the vocabulary, merges of unknown tokens.
  BpeModel(const nlohmann::json& j, const JsonSpot& spot);

  // Appends the ids of one pre-tokenized piece.
  void tokenize(const std::string& piece, std::vector<int32_t>* out) const;

  int32_t token_to_id(const std::string& token) const;  // -1 when absent
  const std::string* id_to_token(int32_t id) const;     // nullptr when absent
  size_t size() const { return vocab_.size(); }         // entries, as tokenizers' get_vocab_size
  int32_t max_id() const { return max_id_; }
  int32_t unk_id() const { return unk_; }

 private:
  struct Merge {
    int32_t rank, id;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void read_merges(const nlohmann::json& merges, const JsonSpot& spot);
  std::vector<int32_t> merge_word(const std::string& piece) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<int32_t, std::string> by_id_;
  std::unordered_map<uint64_t, Merge> merges_;
  int32_t unk_ = -1, max_id_ = -1;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  // Pieces repeat (words of a corpus): their ids, as tokenizers' cache keeps them.
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace shardtrain::data
