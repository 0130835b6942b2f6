#include "shardtrain/data/token_dataset.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include "shardtrain/runtime/error.h"

namespace shardtrain {

std::vector<int32_t> encode_bytes(const std::string& text, bool bos) {
  std::vector<int32_t> ids;
  ids.reserve(text.size() + 1);
  if (bos) ids.push_back(1);
  for (unsigned char c : text) ids.push_back(3 + static_cast<int32_t>(c));
  return ids;
}

std::string decode_bytes(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids)
    if (id >= 3 && id < kByteVocab) s.push_back(static_cast<char>(id - 3));
  return s;
}

const std::string& builtin_corpus() {
  // Arithmetic facts from a fixed LCG with a few prose lines woven in: the held-out tail has the
  // same distribution as the training part, so validation loss is meaningful.
  static const std::string corpus = [] {
    const char* prose[] = {
        "shardtrain fine-tunes Llama-2 models with fully sharded data parallelism.\n",
        "MPI starts every rank; NCCL moves the tensors; HDF5 keeps the checkpoints.\n",
        "Each decoder layer is one FSDP unit: gather, compute, then free the full weights.\n",
        "The quick brown fox jumps over the lazy dog while the loss goes down.\n",
    };
    std::ostringstream os;
    uint32_t state = 12345;
    auto next = [&state](uint32_t mod) {
      state = state * 1664525u + 1013904223u;
      return (state >> 8) % mod;
    };
    for (int i = 0; i < 1600; ++i) {
      if (i % 40 == 0) os << prose[(i / 40) % 4];
      const uint32_t a = next(100), b = next(100);
      os << a << " + " << b << " = " << a + b << "\n";
    }
    return os.str();
  }();
  return corpus;
}

TokenDataset::TokenDataset(std::vector<int32_t> tokens, int64_t seq_len, std::string origin)
    : tokens_(std::move(tokens)), seq_len_(seq_len), origin_(std::move(origin)) {
  if (seq_len_ <= 1) throw UsageError("--seq-len must be at least 2, got " + std::to_string(seq_len_));
  num_samples_ = static_cast<int64_t>(tokens_.size()) / seq_len_;
  if (num_samples_ == 0)
    throw UsageError("--data " + origin_ + ": " + std::to_string(tokens_.size()) +
                     " tokens is less than one --seq-len " + std::to_string(seq_len_) + " sample");
  for (int32_t t : tokens_) {
    if (t < 0) throw Error("--data " + origin_ + ": negative token id " + std::to_string(t));
    max_token_ = std::max<int64_t>(max_token_, t);
  }
}

TokenDataset TokenDataset::from_file(const std::string& path, int64_t seq_len) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError("--data: cannot open " + path + " (no such file)");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const bool text = path.size() >= 4 && path.compare(path.size() - 4, 4, ".txt") == 0;
  if (text) return TokenDataset(encode_bytes(bytes), seq_len, path);
  if (bytes.size() % 4 != 0)
    throw Error("--data " + path + ": a token file holds little-endian uint32 ids, but its size " +
                std::to_string(bytes.size()) + " is not a multiple of 4");
  std::vector<int32_t> ids(bytes.size() / 4);
  for (size_t i = 0; i < ids.size(); ++i) {
    uint32_t v = 0;
    for (int b = 3; b >= 0; --b) v = (v << 8) | static_cast<unsigned char>(bytes[i * 4 + b]);
    if (v > 0x7fffffffu) throw Error("--data " + path + ": token id " + std::to_string(v) + " is too large");
    ids[i] = static_cast<int32_t>(v);
  }
  return TokenDataset(std::move(ids), seq_len, path);
}

TokenDataset TokenDataset::builtin(int64_t seq_len) {
  return TokenDataset(encode_bytes(builtin_corpus()), seq_len, "builtin-corpus");
}

Batch TokenDataset::gather(const std::vector<int64_t>& indices) const {
  const int64_t B = static_cast<int64_t>(indices.size());
  auto tokens = at::empty({B, seq_len_}, at::kLong);
  auto* out = tokens.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    const int32_t* src = tokens_.data() + indices[b] * seq_len_;
    std::copy(src, src + seq_len_, out + b * seq_len_);
  }
  return {tokens, tokens.clone()};
}

std::pair<TokenDataset, TokenDataset> TokenDataset::split(double fraction) const {
  if (num_samples_ < 2) throw UsageError("--data " + origin_ + ": need at least 2 samples to split off validation");
  int64_t n_val = std::clamp<int64_t>(static_cast<int64_t>(num_samples_ * fraction), 1, num_samples_ - 1);
  const int64_t n_train = num_samples_ - n_val;
  std::vector<int32_t> a(tokens_.begin(), tokens_.begin() + n_train * seq_len_);
  std::vector<int32_t> b(tokens_.begin() + n_train * seq_len_, tokens_.begin() + num_samples_ * seq_len_);
  return {TokenDataset(std::move(a), seq_len_, origin_), TokenDataset(std::move(b), seq_len_, origin_ + " (validation)")};
}

std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> p(n);
  for (int64_t i = 0; i < n; ++i) p[i] = i;
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(epoch) + 1;
  auto next = [&state]() {  // splitmix64
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  for (int64_t i = n - 1; i > 0; --i) std::swap(p[i], p[next() % static_cast<uint64_t>(i + 1)]);
  return p;
}

DataLoader::DataLoader(const TokenDataset& ds, int64_t batch_size, uint64_t seed, bool shuffle)
    : ds_(&ds), batch_(batch_size), seed_(seed), shuffle_(shuffle) {
  if (batch_ <= 0) throw UsageError("--batch-size must be positive");
  if (ds.size() < batch_)
    throw UsageError("--batch-size " + std::to_string(batch_) + " exceeds the " + std::to_string(ds.size()) +
                     " samples of " + ds.origin() + "; lower --batch-size or --seq-len");
}

Batch DataLoader::next() {
  if (order_.empty() || cursor_ + batch_ > static_cast<int64_t>(order_.size())) {
    if (!order_.empty()) ++epoch_;
    if (shuffle_) {
      order_ = epoch_permutation(ds_->size(), seed_, epoch_);
    } else {
      order_.resize(ds_->size());
      for (int64_t i = 0; i < ds_->size(); ++i) order_[i] = i;
    }
    cursor_ = 0;
  }
  std::vector<int64_t> idx(order_.begin() + cursor_, order_.begin() + cursor_ + batch_);
  cursor_ += batch_;
  return ds_->gather(idx);
}

}  // namespace shardtrain
