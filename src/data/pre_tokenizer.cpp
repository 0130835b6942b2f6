#include "shardtrain/data/pre_tokenizer.h"

#include <array>
#include <tuple>

namespace shardtrain::data {

namespace {

// GPT-2's pre-tokenization regex, which ByteLevel applies when use_regex is true.
const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct ByteTable {
  std::array<std::string, 256> chars;
  std::array<int, 512> bytes;  // every table character is below U+0200
};

// openai/gpt-2 encoder.py bytes_to_unicode: printable bytes stand for themselves, the rest for
// U+0100 onwards in byte order.
const ByteTable& byte_table() {
  static const ByteTable t = [] {
    ByteTable b;
    b.bytes.fill(-1);
    int next = 0;
    for (int i = 0; i < 256; ++i) {
      const bool printable =
          (i >= '!' && i <= '~') || (i >= 0xA1 && i <= 0xAC) || (i >= 0xAE && i <= 0xFF);
      const char32_t c = printable ? static_cast<char32_t>(i) : static_cast<char32_t>(256 + next++);
      utf8_append(b.chars[i], c);
      b.bytes[c] = i;
    }
    return b;
  }();
  return t;
}

const std::shared_ptr<const UnicodeRegex>& gpt2_regex() {
  static const auto re =
      std::make_shared<const UnicodeRegex>(kGpt2Pattern, "GPT-2's ByteLevel pattern");
  return re;
}

SplitBehavior parse_behavior(const nlohmann::json& obj, const JsonSpot& spot) {
  const std::string b = json_string(obj, "behavior", spot);
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  refuse(
      spot.at("behavior"),
      "is \"" + b +
          "\"; tokenizers knows Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
}

using Span = std::tuple<size_t, size_t, bool>;  // begin, end, matched

// tokenizers' Pattern::find_matches: the matches and the gaps between them, covering the text.
std::vector<Span> cover(const UnicodeRegex& re, std::string_view text, bool invert) {
  std::vector<Span> spans;
  size_t prev = 0;
  for (const auto& [b, e] : re.find_all(text)) {
    if (prev != b) spans.emplace_back(prev, b, invert);
    spans.emplace_back(b, e, !invert);
    prev = e;
  }
  if (prev != text.size()) spans.emplace_back(prev, text.size(), invert);
  return spans;
}

// NormalizedString::split's folds, as (begin, end, keep).
std::vector<Span> apply_behavior(const std::vector<Span>& spans, SplitBehavior behavior) {
  std::vector<Span> out;
  bool previous = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const auto& [b, e, m] : spans) out.emplace_back(b, e, true);
      return out;
    case SplitBehavior::kRemoved:
      for (const auto& [b, e, m] : spans) out.emplace_back(b, e, !m);
      return out;
    case SplitBehavior::kContiguous:
      for (const auto& [b, e, m] : spans) {
        if (m == previous && !out.empty())
          std::get<1>(out.back()) = e;
        else
          out.emplace_back(b, e, true);
        previous = m;
      }
      return out;
    case SplitBehavior::kMergedWithPrevious:
      for (const auto& [b, e, m] : spans) {
        if (m && !previous && !out.empty())
          std::get<1>(out.back()) = e;
        else
          out.emplace_back(b, e, true);
        previous = m;
      }
      return out;
    case SplitBehavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        const auto& [b, e, m] = *it;
        if (m && !previous && !out.empty())
          std::get<0>(out.back()) = b;
        else
          out.emplace_back(b, e, true);
        previous = m;
      }
      return {out.rbegin(), out.rend()};
  }
  return out;
}

void split_piece(const std::string& piece, const UnicodeRegex& re, SplitBehavior behavior,
                 bool invert, std::vector<std::string>* out) {
  for (const auto& [b, e, keep] : apply_behavior(cover(re, piece, invert), behavior))
    if (keep && e > b) out->push_back(piece.substr(b, e - b));
}

std::string to_byte_level(const std::string& piece) {
  std::string out;
  out.reserve(piece.size() * 2);
  for (char c : piece) out += byte_table().chars[static_cast<unsigned char>(c)];
  return out;
}

}  // namespace

TextNormalizer::TextNormalizer(const nlohmann::json& j, const JsonSpot& spot) {
  if (j.is_null()) return;
  const std::string type = json_type(j, spot);
  if (type == "NFC") {
    nfc_ = true;
    return;
  }
  if (type != "Sequence")
    refuse(spot.at("type"),
           "is \"" + type +
               "\"; shardtrain implements the normalizers null, NFC and a Sequence of NFC");
  const auto& list = json_member(j, "normalizers", spot);
  if (!list.is_array()) refuse(spot.at("normalizers"), "is not a list");
  for (size_t i = 0; i < list.size(); ++i) {
    const TextNormalizer inner(list[i], spot.at("normalizers").index(i));
    nfc_ = nfc_ || inner.nfc_;
  }
}

std::string TextNormalizer::apply(std::string_view text) const {
  return nfc_ ? nfc(text) : std::string(text);
}

PreTokenizer::PreTokenizer(const nlohmann::json& j, const JsonSpot& spot) {
  if (!j.is_null()) add_step(j, spot);
}

void PreTokenizer::add_step(const nlohmann::json& j, const JsonSpot& spot) {
  const std::string type = json_type(j, spot);
  Step s;
  if (type == "Sequence") {
    const auto& list = json_member(j, "pretokenizers", spot);
    if (!list.is_array()) refuse(spot.at("pretokenizers"), "is not a list");
    for (size_t i = 0; i < list.size(); ++i) add_step(list[i], spot.at("pretokenizers").index(i));
    return;
  }
  if (type == "Split") {
    const auto& pattern = json_member(j, "pattern", spot);
    const JsonSpot where = spot.at("pattern");
    if (pattern.contains("Regex") && pattern["Regex"].is_string())
      s.regex =
          std::make_shared<const UnicodeRegex>(pattern["Regex"].get<std::string>(), where.name());
    else if (pattern.contains("String") && pattern["String"].is_string())
      s.regex = std::make_shared<const UnicodeRegex>(
          escape_regex(pattern["String"].get<std::string>()), where.name());
    else
      refuse(where, "is " + json_text(pattern) + ", not {\"Regex\": ...} or {\"String\": ...}");
    s.behavior = parse_behavior(j, spot);
    s.invert = json_bool(j, "invert", false, spot);
  } else if (type == "ByteLevel") {
    s.byte_level = true;
    s.add_prefix_space = json_bool(j, "add_prefix_space", true, spot);
    if (json_bool(j, "use_regex", true, spot)) s.regex = gpt2_regex();
  } else {
    refuse(spot.at("type"), "is \"" + type +
                                "\"; shardtrain implements the pre-tokenizers Split and ByteLevel, "
                                "alone or in a Sequence");
  }
  steps_.push_back(std::move(s));
}

void PreTokenizer::split(std::string_view text, std::vector<std::string>* out) const {
  if (text.empty()) return;  // tokenizers drops empty pieces
  std::vector<std::string> pieces{std::string(text)};
  std::vector<std::string> next;
  for (const Step& s : steps_) {
    next.clear();
    for (auto& p : pieces) {
      if (s.byte_level && s.add_prefix_space && p[0] != ' ') p.insert(p.begin(), ' ');
      if (s.regex)
        split_piece(p, *s.regex, s.behavior, s.invert, &next);
      else
        next.push_back(std::move(p));
    }
    if (s.byte_level)
      for (auto& p : next) p = to_byte_level(p);
    pieces.swap(next);
  }
  for (auto& p : pieces) out->push_back(std::move(p));
}

const std::string& byte_level_char(unsigned char b) { return byte_table().chars[b]; }

int byte_level_byte(char32_t c) { return c < 512 ? byte_table().bytes[c] : -1; }

}  // namespace shardtrain::data
