#include "shardtrain/data/tokenizer.h"

#include <sentencepiece_processor.h>

#include <filesystem>

#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/sha256.h"

namespace shardtrain::data {

Tokenizer::Tokenizer(const std::string& model_path)
    : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()), path_(model_path) {
  if (!std::filesystem::is_regular_file(model_path))
    throw runtime::UsageError("--tokenizer " + model_path + " is not a file; pass a SentencePiece tokenizer.model");
  const auto st = sp_->Load(model_path);
  if (!st.ok())
    throw runtime::UsageError("--tokenizer " + model_path + " is not a SentencePiece model: " + st.ToString());
  bos_ = sp_->bos_id();
  eos_ = sp_->eos_id();
  vocab_ = sp_->GetPieceSize();
  if (bos_ < 0 || eos_ < 0)
    throw runtime::UsageError("--tokenizer " + model_path + " defines no BOS/EOS ids; train it with bos_id=1 eos_id=2 as Llama-2's is");
  sha256_ = runtime::sha256_file(model_path);
}

Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

std::vector<int32_t> Tokenizer::encode(const std::string& text, bool add_bos, bool add_eos) const {
  std::vector<int> ids;
  const auto st = sp_->Encode(text, &ids);
  if (!st.ok()) throw runtime::Error("sentencepiece could not encode text: " + st.ToString());
  std::vector<int32_t> out;
  out.reserve(ids.size() + 2);
  if (add_bos) out.push_back(bos_);
  out.insert(out.end(), ids.begin(), ids.end());
  if (add_eos) out.push_back(eos_);
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::vector<int> keep;
  keep.reserve(ids.size());
  for (int32_t id : ids)
    if (id != bos_ && id != eos_ && id >= 0 && id < vocab_) keep.push_back(id);
  std::string text;
  const auto st = sp_->Decode(keep, &text);
  if (!st.ok()) throw runtime::Error("sentencepiece could not decode ids: " + st.ToString());
  return text;
}

int32_t Tokenizer::unk_id() const { return sp_->unk_id(); }

std::string Tokenizer::piece(int32_t id) const { return sp_->IdToPiece(id); }

void Tokenizer::require_fits(int64_t model_vocab_size) const {
  if (vocab_ > model_vocab_size)
    throw runtime::UsageError("--tokenizer " + path_ + " has " + std::to_string(vocab_) + " pieces but the model's vocab_size is " +
                     std::to_string(model_vocab_size) + "; use the tokenizer.model that came with the model");
}

}  // namespace shardtrain::data
