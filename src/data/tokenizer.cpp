#include "shardtrain/data/tokenizer.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>

#include "shardtrain/data/added_vocabulary.h"
#include "shardtrain/data/bpe_tokenizer.h"
#include "shardtrain/data/sentencepiece_proto.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/sha256.h"

namespace fs = std::filesystem;

namespace shardtrain::data {

namespace {
const char* const kWhatToPass =
    "pass a SentencePiece .model, a tokenizer.json, or a model directory holding one";
}  // namespace

std::string resolve_tokenizer_file(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  if (fs::is_directory(p, ec)) {
    // Llama-2's and Mistral's directories hold both: their tokenizer.json was converted from the
    // SentencePiece model (and uses normalizers the byte-level reader refuses), so the model wins.
    for (const char* name : {"tokenizer.model", "tokenizer.json"})
      if (fs::is_regular_file(p / name, ec)) return (p / name).string();
    throw runtime::UsageError("--tokenizer " + path +
                              " is a directory with neither tokenizer.json nor tokenizer.model; " +
                              kWhatToPass);
  }
  if (!fs::exists(p, ec))
    throw runtime::UsageError("--tokenizer " + path + " does not exist; " + kWhatToPass);
  if (!fs::is_regular_file(p, ec))
    throw runtime::UsageError("--tokenizer " + path + " is not a file; " + kWhatToPass);
  return path;
}

bool is_tokenizer_json(const std::string& file) {
  if (fs::path(file).extension() == ".json") return true;
  std::ifstream in(file, std::ios::binary);
  char c = 0;
  while (in.get(c) && std::isspace(static_cast<unsigned char>(c))) {
  }
  return in && c == '{';  // a renamed tokenizer.json; a SentencePiece model is a protobuf
}

Tokenizer::Tokenizer(const std::string& path) : path_(resolve_tokenizer_file(path)) {
  const TokenizerConfig cfg = read_tokenizer_config(fs::path(path_).parent_path().string());
  if (is_tokenizer_json(path_))
    load_json(cfg);
  else
    load_sentencepiece(cfg);
  // transformers' generate() stops at generation_config.json's eos_token_id (every one), else at
  // EOS.
  stop_ids_ = cfg.generation_eos_ids.empty() ? std::vector<int32_t>{eos_} : cfg.generation_eos_ids;
  sha256_ = runtime::sha256_file(path_);
}

Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

int32_t Tokenizer::special_id(const SpecialTokenName& name, const char* key) const {
  const int32_t id = token_id(name.content);
  if (id < 0)
    throw runtime::UsageError(
        name.file + ": " + key + " \"" + name.content + "\" is not a token of " + path_ +
        "; use the tokenizer files that belong together (the model directory's)");
  return id;
}

void Tokenizer::load_sentencepiece(const TokenizerConfig& cfg) {
  sp_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto st = sp_->Load(path_);
  if (!st.ok())
    throw runtime::UsageError("--tokenizer " + path_ + " is not a SentencePiece model: " +
                              st.ToString() + "; " + kWhatToPass);
  sp_pieces_ = sp_->GetPieceSize();
  vocab_ = sp_pieces_;
  std::map<int32_t, AddedTokenEntry> added = cfg.added_tokens;
  if (cfg.has_config)  // transformers adds the special tokens the config names, too
    for (const SpecialTokenName* name : {&cfg.bos, &cfg.eos, &cfg.unk, &cfg.pad}) {
      const int32_t id = name->set() ? sp_->PieceToId(name->content) : -1;
      if (id >= 0 && sp_->IdToPiece(id) == name->content && !added.count(id))
        added[id] = {name->content, false, false, false, false, true};
    }
  sp_added_ = std::make_unique<AddedVocabulary>(added);
  vocab_ = std::max(vocab_, sp_added_->max_id() + 1);
  // transformers 5's LlamaTokenizer defaults legacy to false; a bare model keeps SentencePiece's
  // own rule. A model whose SentencePiece adds no "▁" (Gemma's) has none to place.
  sp_hf_ = cfg.has_config;
  sp_legacy_ = cfg.legacy.value_or(!cfg.has_config);
  sp_prefix_ = cfg.add_prefix_space.value_or(true);
  split_special_ = cfg.split_special_tokens;
  std::vector<std::string> probe;
  sp_dummy_prefix_ = sp_->Encode("a", &probe).ok() && !probe.empty() &&
                     probe[0].rfind("\xe2\x96\x81", 0) == 0;  // "▁a" or "▁", "a"
  if (sp_dummy_prefix_) {  // the same model without its "▁", for texts that get none
    sp_plain_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
    const auto st =
        sp_plain_->LoadFromSerializedProto(without_dummy_prefix(sp_->serialized_model_proto()));
    if (!st.ok())
      throw runtime::Error("sentencepiece could not reload " + path_ + ": " + st.ToString());
  }
  // Without config files: the model's own ids, as before tokenizer_config.json was read.
  bos_ = cfg.bos.set()                                     ? special_id(cfg.bos, "bos_token")
         : cfg.bos.state == SpecialTokenName::State::kNull ? -1
                                                           : sp_->bos_id();
  eos_ = cfg.eos.set()                                     ? special_id(cfg.eos, "eos_token")
         : cfg.eos.state == SpecialTokenName::State::kNull ? -1
                                                           : sp_->eos_id();
  pad_ = cfg.pad.set() ? special_id(cfg.pad, "pad_token") : -1;
  add_bos_token_ = cfg.add_bos_token.value_or(true);  // LlamaTokenizer's defaults
  add_eos_token_ = cfg.add_eos_token.value_or(false);
  if ((cfg.bos.state == SpecialTokenName::State::kAbsent && bos_ < 0) || eos_ < 0)
    throw runtime::UsageError(
        "--tokenizer " + path_ +
        " defines no BOS/EOS ids; train it with bos_id=1 eos_id=2 as Llama-2's is");
}

void Tokenizer::load_json(const TokenizerConfig& cfg) {
  bpe_ = std::make_unique<BpeTokenizer>(path_);
  bpe_->set_split_special_tokens(cfg.split_special_tokens);
  vocab_ = bpe_->vocab_size();
  using State = SpecialTokenName::State;
  bos_ = cfg.bos.set()                     ? special_id(cfg.bos, "bos_token")
         : cfg.bos.state == State::kAbsent ? cfg.generation_bos
                                           : -1;
  eos_ = cfg.eos.set()                     ? special_id(cfg.eos, "eos_token")
         : cfg.eos.state == State::kAbsent ? cfg.generation_eos
                                           : -1;
  pad_ = cfg.pad.set() ? special_id(cfg.pad, "pad_token") : -1;
  const std::string dir = fs::path(path_).parent_path().string();
  if (eos_ < 0)
    throw runtime::UsageError(
        path_ +
        ": no eos_token: put the model's tokenizer_config.json (or special_tokens_map.json, "
        "generation_config.json) beside it; training appends EOS to every sample");
  if (bos_ >= vocab_ || eos_ >= vocab_)
    throw runtime::UsageError((dir.empty() ? std::string(".") : dir) +
                              "/generation_config.json: bos_token_id/eos_token_id " +
                              std::to_string(std::max(bos_, eos_)) + " is outside " + path_ +
                              "'s " + std::to_string(vocab_) + " ids");
  const auto& suffix = bpe_->special_suffix();
  suffix_has_eos_ = !suffix.empty() && suffix.back() == eos_;
}

std::vector<int32_t> Tokenizer::encode(const std::string& text, bool add_bos, bool add_eos) const {
  if (bpe_) {
    std::vector<int32_t> ids = bpe_->encode(text, add_bos);
    if (add_eos && !(add_bos && suffix_has_eos_)) ids.push_back(eos_);
    return ids;
  }
  std::vector<int32_t> out;
  if (add_bos && add_bos_token_ && bos_ >= 0) out.push_back(bos_);
  // With its tokenizer_config.json, as transformers; a bare model as SentencePiece itself.
  if (sp_hf_) {
    const auto ids = encode_run(text, /*after_special=*/false);
    out.insert(out.end(), ids.begin(), ids.end());
  } else {
    std::vector<int> ids;
    const auto st = sp_->Encode(text, &ids);
    if (!st.ok()) throw runtime::Error("sentencepiece could not encode text: " + st.ToString());
    out.insert(out.end(), ids.begin(), ids.end());
  }
  if (add_eos || (add_bos && add_eos_token_)) out.push_back(eos_);
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  if (bpe_) return bpe_->decode(ids, /*skip_special=*/true);
  std::vector<int> keep;
  keep.reserve(ids.size());
  for (int32_t id : ids)
    if (id != bos_ && id != eos_ && id != pad_ && id >= 0 && id < sp_pieces_) keep.push_back(id);
  std::string text;
  const auto st = sp_->Decode(keep, &text);
  if (!st.ok()) throw runtime::Error("sentencepiece could not decode ids: " + st.ToString());
  return text;
}

std::vector<int32_t> Tokenizer::encode_run(const std::string& text, bool after_special) const {
  if (bpe_) return encode(text, /*add_bos=*/false);
  std::vector<int32_t> out;
  bool at_start = !after_special;
  for (const TextSegment& seg : sp_added_->split(text, split_special_)) {
    if (seg.id >= 0) {
      out.push_back(seg.id);
    } else {
      const auto ids = encode_sp_run(seg.text, at_start);
      out.insert(out.end(), ids.begin(), ids.end());
    }
    at_start = false;
  }
  return out;
}

std::vector<int32_t> Tokenizer::encode_sp_run(const std::string& text, bool at_start) const {
  // Metaspace puts "▁" before a stretch that does not already start with one (a space becomes
  // one): every stretch (legacy), the text's first ("first"), none (add_prefix_space false).
  const bool starts_space = text.rfind(' ', 0) == 0 || text.rfind("\xe2\x96\x81", 0) == 0;
  const bool plain = sp_dummy_prefix_ && (!sp_prefix_ || !(sp_legacy_ || at_start) || starts_space);
  std::vector<int> ids;
  const auto st = (plain ? sp_plain_ : sp_)->Encode(text, &ids);
  if (!st.ok()) throw runtime::Error("sentencepiece could not encode text: " + st.ToString());
  return {ids.begin(), ids.end()};
}

int32_t Tokenizer::token_id(const std::string& token) const {
  if (bpe_) return bpe_->token_to_id(token);
  const int32_t id = sp_->PieceToId(token);  // SentencePiece answers unk for an unknown piece
  if (id >= 0 && sp_->IdToPiece(id) == token) return id;
  return sp_added_->token_to_id(token);
}

std::pair<bool, bool> Tokenizer::strips(int32_t id) const {
  if (bpe_) return bpe_->strips(id);
  return sp_added_->strips(id);
}

int32_t Tokenizer::unk_id() const { return bpe_ ? bpe_->unk_id() : sp_->unk_id(); }

std::string Tokenizer::piece(int32_t id) const {
  if (bpe_) return bpe_->id_to_token(id);
  if (id >= 0 && id < sp_pieces_) return sp_->IdToPiece(id);
  const std::string* added = sp_added_->id_to_token(id);  // Phi-3's <|endoftext|>, after them
  return added ? *added : std::string();
}

void Tokenizer::require_fits(int64_t model_vocab_size) const {
  if (vocab_ > model_vocab_size)
    throw runtime::UsageError(
        "--tokenizer " + path_ + " has " + std::to_string(vocab_) +
        " pieces but the model's vocab_size is " + std::to_string(model_vocab_size) +
        " (its ids, added tokens included, go up to " + std::to_string(vocab_ - 1) +
        "); use the tokenizer that came with the model");
}

}  // namespace shardtrain::data
