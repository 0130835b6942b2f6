// Fixed-length token samples for causal-LM training: from a token file, a text file, or the
// built-in corpus, with a deterministic (seed, epoch) shuffle.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace shardtrain {

struct Batch {
  at::Tensor tokens;  // [B, T] int64
  at::Tensor labels;  // [B, T] int64, -100 where no loss is taken
};

// Byte-level ids used until a SentencePiece model is given: 0 pad, 1 BOS, 2 EOS, 3 + byte.
constexpr int64_t kByteVocab = 259;
std::vector<int32_t> encode_bytes(const std::string& text, bool bos = true);
std::string decode_bytes(const std::vector<int32_t>& ids);
const std::string& builtin_corpus();

class TokenDataset {
 public:
  TokenDataset() = default;
  // tokens are cut into consecutive samples of seq_len; a short tail is dropped.
  TokenDataset(std::vector<int32_t> tokens, int64_t seq_len, std::string origin);
  // *.txt: UTF-8 text, encoded byte-wise; anything else: little-endian uint32 token ids.
  static TokenDataset from_file(const std::string& path, int64_t seq_len);
  static TokenDataset builtin(int64_t seq_len);

  int64_t size() const { return num_samples_; }
  int64_t seq_len() const { return seq_len_; }
  int64_t max_token() const { return max_token_; }
  const std::string& origin() const { return origin_; }
  Batch gather(const std::vector<int64_t>& indices) const;
  // The last `fraction` of the samples become the validation set (at least one each).
  std::pair<TokenDataset, TokenDataset> split(double fraction) const;

 private:
  std::vector<int32_t> tokens_;
  int64_t seq_len_ = 0, num_samples_ = 0, max_token_ = 0;
  std::string origin_;
};

// Deterministic Fisher-Yates permutation from (seed, epoch), identical on every platform.
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch);

class DataLoader {
 public:
  DataLoader(const TokenDataset& ds, int64_t batch_size, uint64_t seed, bool shuffle = true);
  Batch next();  // wraps into the next epoch
  int64_t epoch() const { return epoch_; }
  int64_t batches_per_epoch() const { return ds_->size() / batch_; }

 private:
  const TokenDataset* ds_;
  int64_t batch_;
  uint64_t seed_;
  bool shuffle_;
  int64_t epoch_ = 0, cursor_ = 0;
  std::vector<int64_t> order_;
};

}  // namespace shardtrain
