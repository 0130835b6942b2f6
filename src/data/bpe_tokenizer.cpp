#include "shardtrain/data/bpe_tokenizer.h"

#include <algorithm>
#include <fstream>

#include "shardtrain/data/unicode_text.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::data {

namespace {

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw runtime::UsageError(path + " cannot be read");
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("model"))
    throw runtime::UsageError(
        "--tokenizer " + path + " is not a SentencePiece model or a Hugging Face tokenizer.json (" +
        (j.is_object() ? "a JSON object without \"model\"" : "not a JSON object") +
        "); pass a .model, a tokenizer.json, or a model directory holding one");
  return j;
}

// j[key], or null when absent: tokenizers treats a missing component as none.
const nlohmann::json& member_or_null(const nlohmann::json& j, const char* key) {
  static const nlohmann::json null_value;
  const auto it = j.find(key);
  return it == j.end() ? null_value : *it;
}

// One TemplateProcessing's "single" template: the special ids before and after $A.
void read_template(const nlohmann::json& j, const JsonSpot& spot, std::vector<int32_t>* before,
                   std::vector<int32_t>* after) {
  const auto& single = json_member(j, "single", spot);
  const auto& specials = json_member(j, "special_tokens", spot);
  if (!single.is_array()) refuse(spot.at("single"), "is not a list");
  bool seen_a = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const JsonSpot at = spot.at("single").index(i);
    const auto& piece = single[i];
    if (piece.contains("Sequence")) {
      const auto id = piece["Sequence"].value("id", std::string());
      if (id != "A" || seen_a)
        refuse(at, "is " + json_text(piece) + "; a single-sequence template holds $A once");
      seen_a = true;
      continue;
    }
    if (!piece.contains("SpecialToken") || !piece["SpecialToken"].contains("id") ||
        !piece["SpecialToken"]["id"].is_string())
      refuse(at, "is " + json_text(piece) +
                     ", neither {\"Sequence\": ...} nor {\"SpecialToken\": ...}");
    const std::string name = piece["SpecialToken"]["id"].get<std::string>();
    if (!specials.is_object() || !specials.contains(name))
      refuse(spot.at("special_tokens"), "has no entry \"" + name + "\"");
    const auto& ids = specials[name].contains("ids") ? specials[name]["ids"] : nlohmann::json();
    if (!ids.is_array())
      refuse(spot.at("special_tokens").at(name).at("ids"), "is not a list of ids");
    for (const auto& id : ids) {
      if (!id.is_number_integer())
        refuse(spot.at("special_tokens").at(name).at("ids"),
               "holds " + json_text(id) + ", not an id");
      (seen_a ? after : before)->push_back(id.get<int32_t>());
    }
  }
  if (!seen_a) refuse(spot.at("single"), "has no $A: the text itself would be dropped");
}

}  // namespace

BpeTokenizer::BpeTokenizer(const std::string& path) : BpeTokenizer(path, read_json(path)) {}

BpeTokenizer::BpeTokenizer(const std::string& path, const nlohmann::json& j)
    : path_(path),
      normalizer_(member_or_null(j, "normalizer"), {path, "normalizer"}),
      pre_tokenizer_(member_or_null(j, "pre_tokenizer"), {path, "pre_tokenizer"}),
      model_(json_member(j, "model", {path, ""}), {path, "model"}),
      added_(member_or_null(j, "added_tokens"), model_, normalizer_, {path, "added_tokens"}) {
  for (const char* key : {"truncation", "padding"})  // both would change the ids of every encode
    if (!member_or_null(j, key).is_null())
      refuse({path, key},
             "is " + json_text(j[key]) + "; shardtrain needs null (it pads and cuts rows itself)");
  read_post_processor(member_or_null(j, "post_processor"), {path, "post_processor"});
  const auto& decoder = member_or_null(j, "decoder");
  if (!decoder.is_null()) {
    const std::string type = json_type(decoder, {path, "decoder"});
    if (type != "ByteLevel")
      refuse({path, "decoder.type"},
             "is \"" + type + "\"; shardtrain implements the ByteLevel decoder (or null)");
    byte_level_decoder_ = true;
  }
}

void BpeTokenizer::read_post_processor(const nlohmann::json& j, const JsonSpot& spot) {
  if (j.is_null()) return;
  const std::string type = json_type(j, spot);
  if (type == "ByteLevel") return;  // offsets only: the ids stay as they are
  if (type == "TemplateProcessing") {
    std::vector<int32_t> before, after;
    read_template(j, spot, &before, &after);
    prefix_.insert(prefix_.begin(), before.begin(),
                   before.end());  // a later processor wraps the earlier's output
    suffix_.insert(suffix_.end(), after.begin(), after.end());
    return;
  }
  if (type != "Sequence")
    refuse(spot.at("type"),
           "is \"" + type +
               "\"; shardtrain implements TemplateProcessing, ByteLevel and a Sequence of them");
  const auto& list = json_member(j, "processors", spot);
  if (!list.is_array()) refuse(spot.at("processors"), "is not a list");
  for (size_t i = 0; i < list.size(); ++i)
    read_post_processor(list[i], spot.at("processors").index(i));
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text, bool with_special) const {
  if (!valid_utf8(text)) throw runtime::UsageError("text to tokenize is not valid UTF-8");
  std::vector<int32_t> ids;
  if (with_special) ids = prefix_;
  std::vector<std::string> pieces;
  for (const TextSegment& seg : added_.split(text, normalizer_, split_special_)) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
      continue;
    }
    pieces.clear();
    pre_tokenizer_.split(seg.text, &pieces);
    for (const auto& p : pieces) model_.tokenize(p, &ids);
  }
  if (with_special) ids.insert(ids.end(), suffix_.begin(), suffix_.end());
  return ids;
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string out;
  bool first = true;
  for (int32_t id : ids) {
    const std::string* tok = added_.id_to_token(id);
    if (!tok) tok = model_.id_to_token(id);
    if (!tok || (skip_special && added_.is_special(*tok))) continue;
    if (!byte_level_decoder_) {  // tokenizers joins the tokens with spaces when there is no decoder
      if (!first) out += ' ';
      out += *tok;
      first = false;
      continue;
    }
    std::string bytes;
    bool mapped = true;
    for (size_t i = 0; i < tok->size() && mapped;
         i += utf8_char_len(static_cast<unsigned char>((*tok)[i]))) {
      const int b = byte_level_byte(utf8_decode_at(*tok, i));
      mapped = b >= 0;
      bytes += static_cast<char>(b);
    }
    out +=
        mapped ? bytes : *tok;  // a token outside the byte table (an added token) stands as written
  }
  return byte_level_decoder_ ? utf8_lossy(out) : out;
}

int32_t BpeTokenizer::token_to_id(const std::string& token) const {
  const int32_t id = added_.token_to_id(token);
  return id >= 0 ? id : model_.token_to_id(token);
}

std::string BpeTokenizer::id_to_token(int32_t id) const {
  const std::string* tok = added_.id_to_token(id);
  if (!tok) tok = model_.id_to_token(id);
  return tok ? *tok : std::string();
}

int32_t BpeTokenizer::vocab_size() const { return std::max(model_.max_id(), added_.max_id()) + 1; }

}  // namespace shardtrain::data
