#include "shardtrain/data/bpe_model.h"

#include <algorithm>
#include <cstdio>
#include <queue>

#include "shardtrain/data/unicode_text.h"

namespace shardtrain::data {

namespace {

constexpr size_t kCacheEntries = 1 << 18;  // then the cache starts over: memory stays bounded

bool null_or_empty(const nlohmann::json& obj, const char* key) {
  const auto it = obj.find(key);
  return it == obj.end() || it->is_null() || (it->is_string() && it->get<std::string>().empty());
}

struct Symbol {
  int32_t id;
  int64_t prev, next;
  size_t len;  // bytes; 0 once merged into its left neighbour
};

struct Candidate {
  int32_t rank;
  size_t pos;
  int32_t id;
  bool operator<(const Candidate& o) const {  // std::priority_queue pops the largest: invert
    return rank != o.rank ? rank > o.rank : pos > o.pos;
  }
};

void add_symbol(std::vector<Symbol>& word, int32_t id, size_t len) {
  const int64_t n = static_cast<int64_t>(word.size());
  if (!word.empty()) word.back().next = n;
  word.push_back({id, n - 1, -1, len});
}

}  // namespace

BpeModel::BpeModel(const nlohmann::json& j, const JsonSpot& spot) {
  if (!j.is_object()) refuse(spot, "is " + json_text(j) + ", not a BPE model object");
  const auto type = j.find("type");
  if (type != j.end() && *type != "BPE")
    refuse(spot.at("type"), "is " + json_text(*type) +
                                "; shardtrain implements BPE models only (Unigram, WordPiece and "
                                "WordLevel are refused)");
  if (type == j.end() && !j.contains("merges"))
    refuse(spot.at("type"), "is missing and the model has no merges: not a BPE model");
  const auto dropout = j.find("dropout");
  if (dropout != j.end() && !dropout->is_null() &&
      !(dropout->is_number() && dropout->get<double>() == 0.0))
    refuse(spot.at("dropout"),
           "is " + json_text(*dropout) +
               "; BPE dropout makes tokenization random, shardtrain needs null");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (!null_or_empty(j, key))
      refuse(spot.at(key), "is " + json_text(j[key]) + "; shardtrain implements null only");
  fuse_unk_ = json_bool(j, "fuse_unk", false, spot);
  byte_fallback_ = json_bool(j, "byte_fallback", false, spot);
  ignore_merges_ = json_bool(j, "ignore_merges", false, spot);
  const auto& vocab = json_member(j, "vocab", spot);
  if (!vocab.is_object()) refuse(spot.at("vocab"), "is not a JSON object of token: id");
  vocab_.reserve(vocab.size());
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
      refuse(spot.at("vocab"),
             "maps " + json_text(token) + " to " + json_text(id) + ", not an id in [0, 2^31)");
    const auto i = id.get<int32_t>();
    vocab_[token] = i;
    by_id_[i] = token;
    max_id_ = std::max(max_id_, i);
  }
  const auto unk = j.find("unk_token");
  if (unk != j.end() && !unk->is_null()) {
    if (!unk->is_string() || !vocab_.count(unk->get<std::string>()))
      refuse(spot.at("unk_token"), "is " + json_text(*unk) + ", which is not in model.vocab");
    unk_ = vocab_.at(unk->get<std::string>());
  }
  read_merges(json_member(j, "merges", spot), spot.at("merges"));
}

void BpeModel::read_merges(const nlohmann::json& merges, const JsonSpot& spot) {
  if (!merges.is_array()) refuse(spot, "is not a list");
  merges_.reserve(merges.size());
  int32_t rank = 0;
  for (size_t i = 0; i < merges.size(); ++i) {
    const auto& m = merges[i];
    std::string a, b;
    if (m.is_string()) {  // the legacy "a b" form; "#version" lines are comments
      const std::string line = m.get<std::string>();
      if (line.rfind("#version", 0) == 0) continue;
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
        refuse(spot.index(i), "is " + json_text(m) + ", not two tokens separated by one space");
      a = line.substr(0, space);
      b = line.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      refuse(spot.index(i), "is " + json_text(m) + ", not \"a b\" or [\"a\", \"b\"]");
    }
    const int32_t ia = token_to_id(a);
    const int32_t ib = token_to_id(b);
    const int32_t merged = token_to_id(a + b);
    if (ia < 0 || ib < 0 || merged < 0)
      refuse(spot.index(i), "merges " + json_text(a) + " and " + json_text(b) + ", but " +
                                json_text(ia < 0   ? a
                                          : ib < 0 ? b
                                                   : a + b) +
                                " is not in model.vocab");
    merges_[pair_key(ia, ib)] = {rank++,
                                 merged};  // a repeated pair keeps its last rank, as tokenizers'
  }
}

int32_t BpeModel::token_to_id(const std::string& token) const {
  const auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &it->second;
}

void BpeModel::tokenize(const std::string& piece, std::vector<int32_t>* out) const {
  if (piece.empty()) return;
  if (ignore_merges_) {  // Llama-3: a piece in the vocabulary is one token, whatever the merges say
    const int32_t id = token_to_id(piece);
    if (id >= 0) {
      out->push_back(id);
      return;
    }
  }
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    const auto it = cache_.find(piece);
    if (it != cache_.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids = merge_word(piece);
  out->insert(out->end(), ids.begin(), ids.end());
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (cache_.size() >= kCacheEntries) cache_.clear();
  cache_.emplace(piece, std::move(ids));
}

std::vector<int32_t> BpeModel::merge_word(const std::string& piece) const {
  std::vector<Symbol> word;
  word.reserve(piece.size());
  int32_t pending_unk = -1;  // an unknown character's unk, held back so that fuse_unk can extend it
  size_t pending_len = 0;
  for (size_t i = 0; i < piece.size();) {
    const size_t n =
        std::min(utf8_char_len(static_cast<unsigned char>(piece[i])), piece.size() - i);
    const std::string ch = piece.substr(i, n);
    i += n;
    const int32_t id = token_to_id(ch);
    if (id >= 0) {
      if (pending_unk >= 0) add_symbol(word, pending_unk, pending_len);
      pending_unk = -1;
      add_symbol(word, id, n);
      continue;
    }
    if (byte_fallback_) {
      std::vector<int32_t> bytes;
      for (char c : ch) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", static_cast<unsigned char>(c));
        bytes.push_back(token_to_id(name));
      }
      if (std::find(bytes.begin(), bytes.end(), -1) == bytes.end()) {
        for (int32_t b : bytes) add_symbol(word, b, 1);
        continue;
      }
    }
    if (unk_ < 0) continue;  // no unk_token: tokenizers drops the character
    if (pending_unk >= 0 && fuse_unk_) {
      pending_len += n;
      continue;
    }
    if (pending_unk >= 0) add_symbol(word, pending_unk, pending_len);
    pending_unk = unk_;
    pending_len = n;
  }
  if (pending_unk >= 0) add_symbol(word, pending_unk, pending_len);

  // Lowest rank first, leftmost among equals (tokenizers' Word::merge_all).
  std::priority_queue<Candidate> queue;
  const auto lookup = [&](int32_t a, int32_t b) -> const Merge* {
    const auto it = merges_.find(pair_key(a, b));
    return it == merges_.end() ? nullptr : &it->second;
  };
  for (size_t p = 0; p + 1 < word.size(); ++p)
    if (const Merge* m = lookup(word[p].id, word[p + 1].id)) queue.push({m->rank, p, m->id});
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& cur = word[top.pos];
    if (cur.len == 0 || cur.next < 0) continue;
    const Symbol right = word[static_cast<size_t>(cur.next)];
    const Merge* still = lookup(cur.id, right.id);
    if (!still || still->id != top.id) continue;  // an expired entry
    word[static_cast<size_t>(cur.next)].len = 0;
    cur.id = top.id;
    cur.len += right.len;
    cur.next = right.next;
    if (right.next >= 0) word[static_cast<size_t>(right.next)].prev = static_cast<int64_t>(top.pos);
    if (cur.prev >= 0)
      if (const Merge* m = lookup(word[static_cast<size_t>(cur.prev)].id, cur.id))
        queue.push({m->rank, static_cast<size_t>(cur.prev), m->id});
    if (cur.next >= 0)
      if (const Merge* m = lookup(cur.id, word[static_cast<size_t>(cur.next)].id))
        queue.push({m->rank, top.pos, m->id});
  }
  std::vector<int32_t> ids;
  for (const Symbol& s : word)
    if (s.len > 0) ids.push_back(s.id);
  return ids;
}

}  // namespace shardtrain::data
