// A tokenizer.json's normalizer (null, NFC, a Sequence of them) and pre_tokenizer (Split and
// ByteLevel, alone or in a Sequence), as Hugging Face tokenizers applies them.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "shardtrain/data/tokenizer_json_fields.h"
#include "shardtrain/data/unicode_text.h"

namespace shardtrain::data {

class TextNormalizer {
 public:
  TextNormalizer(const nlohmann::json& j, const JsonSpot& spot);  // refuses every type but NFC
  bool active() const { return nfc_; }
  std::string apply(std::string_view text) const;

 private:
  bool nfc_ = false;  // NFC is idempotent: a Sequence of several is one
};

// How Split keeps the pieces its pattern matches (tokenizers' SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

class PreTokenizer {
 public:
  PreTokenizer(const nlohmann::json& j, const JsonSpot& spot);  // null: the text is one piece
  // Appends the pieces of `text` (non-empty, byte-level mapped where a ByteLevel step ran) to out.
  void split(std::string_view text, std::vector<std::string>* out) const;

 private:
  struct Step {
    bool byte_level = false;
    std::shared_ptr<const UnicodeRegex>
        regex;  // Split's pattern, or GPT-2's for ByteLevel use_regex
    SplitBehavior behavior = SplitBehavior::kIsolated;
    bool invert = false, add_prefix_space = false;
  };
  void add_step(const nlohmann::json& j, const JsonSpot& spot);
  std::vector<Step> steps_;
};

// GPT-2's byte-to-character table (every byte as a printable character), as UTF-8.
const std::string& byte_level_char(unsigned char b);
// The byte a table character stands for; -1 for a character outside the table.
int byte_level_byte(char32_t c);

}  // namespace shardtrain::data
