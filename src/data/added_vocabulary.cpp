#include "shardtrain/data/added_vocabulary.h"

#include <algorithm>

#include "shardtrain/data/unicode_text.h"

namespace shardtrain::data {

namespace {

// The code point that ends text (text non-empty, valid UTF-8).
char32_t last_char(std::string_view text) {
  size_t at = text.size() - 1;
  while (at > 0 && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) --at;
  return utf8_decode_at(text, at);
}

}  // namespace

void AddedVocabulary::Trie::insert(const std::string& s, int32_t index) {
  int32_t node = 0;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    const auto it = next[node].find(u);
    if (it != next[node].end()) {
      node = it->second;
      continue;
    }
    const auto fresh = static_cast<int32_t>(next.size());
    next[node][u] = fresh;
    next.emplace_back();
    token.push_back(-1);
    node = fresh;
  }
  token[node] = index;  // a repeated match string: the last token wins
}

AddedVocabulary::AddedVocabulary(const nlohmann::json& tokens, const BpeModel& model,
                                 const TextNormalizer& normalizer, const JsonSpot& spot) {
  if (tokens.is_null()) return;
  if (!tokens.is_array()) refuse(spot, "is not a list");
  auto next_id = static_cast<int32_t>(model.size());  // tokenizers' AddedVocabulary::add_tokens
  for (size_t i = 0; i < tokens.size(); ++i) {
    const JsonSpot at = spot.index(i);
    const auto& t = tokens[i];
    const std::string content = json_string(t, "content", at);
    if (content.empty()) continue;  // tokenizers ignores empty tokens
    const bool special = json_bool(t, "special", false, at);
    Token tok{content,
              content,
              -1,
              json_bool(t, "single_word", false, at),
              json_bool(t, "lstrip", false, at),
              json_bool(t, "rstrip", false, at),
              json_bool(t, "normalized", !special, at),
              special};
    if (tok.normalized && normalizer.active()) tok.match = normalizer.apply(content);
    const auto known = by_content_.find(content);
    if (known != by_content_.end())
      tok.id = known->second;
    else if (model.token_to_id(content) >= 0)
      tok.id = model.token_to_id(content);
    else
      tok.id = next_id++;
    add(std::move(tok));
  }
  // Normalized tokens are looked for in the normalized text, the others in the text as given.
  for (size_t i = 0; i < tokens_.size(); ++i)
    (tokens_[i].normalized ? normalized_ : raw_).insert(tokens_[i].match, static_cast<int32_t>(i));
}

AddedVocabulary::AddedVocabulary(const std::map<int32_t, AddedTokenEntry>& tokens) {
  for (const auto& [id, e] : tokens)
    if (!e.content.empty())
      add({e.content, e.content, id, e.single_word, e.lstrip, e.rstrip, e.normalized, e.special});
  for (size_t i = 0; i < tokens_.size(); ++i)
    raw_.insert(tokens_[i].match, static_cast<int32_t>(i));
}

void AddedVocabulary::add(Token tok) {
  by_content_[tok.content] = tok.id;
  if (tok.special) special_.insert(tok.content);
  max_id_ = std::max(max_id_, tok.id);
  const auto same_id = by_id_.find(tok.id);
  if (same_id != by_id_.end()) {
    tokens_[same_id->second] = std::move(tok);
    return;
  }
  by_id_[tok.id] = tokens_.size();
  tokens_.push_back(std::move(tok));
}

void AddedVocabulary::cut(std::string_view text, const Trie& trie, bool split_special,
                          std::vector<TextSegment>* out) const {
  size_t start_offset = 0;
  size_t pos = 0;
  while (!trie.empty() && pos < text.size()) {
    int32_t node = 0;
    int32_t best = -1;
    size_t best_end = 0;
    for (size_t k = pos; k < text.size(); ++k) {  // the longest token starting at pos
      const auto it = trie.next[node].find(static_cast<unsigned char>(text[k]));
      if (it == trie.next[node].end()) break;
      node = it->second;
      if (trie.token[node] >= 0) {
        best = trie.token[node];
        best_end = k + 1;
      }
    }
    if (best < 0) {
      ++pos;
      continue;
    }
    size_t start = pos;
    size_t stop = best_end;
    pos = best_end;  // matches never overlap, kept or not
    const Token& tok = tokens_[static_cast<size_t>(best)];
    if (split_special && tok.special) continue;
    if (tok.single_word) {
      const bool word_before = start > 0 && is_word_char(last_char(text.substr(0, start)));
      const bool word_after = stop < text.size() && is_word_char(utf8_decode_at(text, stop));
      if (word_before || word_after) continue;
    }
    if (tok.lstrip) start = std::max(trailing_space_start(text.substr(0, start)), start_offset);
    if (tok.rstrip) stop += leading_space_len(text.substr(stop));
    if (start_offset < start)
      out->push_back({std::string(text.substr(start_offset, start - start_offset)), -1});
    out->push_back({std::string(text.substr(start, stop - start)), tok.id});
    start_offset = stop;
  }
  if (start_offset < text.size()) out->push_back({std::string(text.substr(start_offset)), -1});
}

std::vector<TextSegment> AddedVocabulary::split(std::string_view text,
                                                const TextNormalizer& normalizer,
                                                bool split_special) const {
  std::vector<TextSegment> raw;
  cut(text, raw_, split_special, &raw);
  std::vector<TextSegment> out;
  for (auto& seg : raw) {
    if (seg.id >= 0)
      out.push_back(std::move(seg));
    else
      cut(normalizer.apply(seg.text), normalized_, split_special, &out);
  }
  return out;
}

std::vector<TextSegment> AddedVocabulary::split(std::string_view text, bool split_special) const {
  std::vector<TextSegment> out;
  cut(text, raw_, split_special, &out);
  return out;
}

int32_t AddedVocabulary::token_to_id(const std::string& content) const {
  const auto it = by_content_.find(content);
  return it == by_content_.end() ? -1 : it->second;
}

const std::string* AddedVocabulary::id_to_token(int32_t id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second].match;
}

std::pair<bool, bool> AddedVocabulary::strips(int32_t id) const {
  const auto it = by_id_.find(id);
  if (it == by_id_.end()) return {false, false};
  return {tokens_[it->second].lstrip, tokens_[it->second].rstrip};
}

}  // namespace shardtrain::data
