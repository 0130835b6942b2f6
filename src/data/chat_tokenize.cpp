#include "shardtrain/data/chat_tokenize.h"

#include <algorithm>

#include "shardtrain/data/unicode_text.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::data {

ChatEncoder::ChatEncoder(const Tokenizer& tok, ChatTemplate t, bool enable_thinking)
    : tok_(tok), t_(t), enable_thinking_(enable_thinking) {
  if (!enable_thinking && t != ChatTemplate::kQwen3)
    throw runtime::UsageError(std::string("--no-thinking: the ") + chat_template_name(t) +
                              " chat template has no enable_thinking; only qwen3's does");
  if (tok.bos_id() >= 0) bos_ = tok.piece(tok.bos_id());
  eos_ = tok.piece(tok.eos_id());
}

int32_t ChatEncoder::special_id(const std::string& text) const {
  if (!bos_.empty() && text == bos_) return tok_.bos_id();
  if (text == eos_) return tok_.eos_id();
  const auto it = special_ids_.find(text);
  if (it != special_ids_.end()) return it->second;
  const int32_t id = tok_.token_id(text);
  const auto ids = id >= 0 ? std::vector<int32_t>{id} : tok_.encode(text, /*add_bos=*/false);
  if (ids.size() != 1)
    throw runtime::UsageError(std::string("--chat-template ") + chat_template_name(t_) +
                              ": its token " + text + " is not one token of " + tok_.path() +
                              "; use the template of the tokenizer's model family");
  return special_ids_[text] = ids[0];
}

void ChatEncoder::strip_beside_specials(std::vector<ChatPiece>& pieces) const {
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (!pieces[i].special) continue;
    const auto [lstrip, rstrip] = tok_.strips(special_id(pieces[i].text));
    for (size_t k = i + 1; rstrip && k < pieces.size() && !pieces[k].special; ++k) {
      std::string& t = pieces[k].text;
      t.erase(0, leading_space_len(t));
      if (!t.empty()) break;
    }
    for (size_t k = i; lstrip && k-- > 0 && !pieces[k].special;) {
      std::string& t = pieces[k].text;
      t.resize(trailing_space_start(t));
      if (!t.empty()) break;
    }
  }
}

ChatSample ChatEncoder::encode(const std::vector<ChatMessage>& messages, bool train_on_all,
                               bool add_generation_prompt) const {
  std::vector<ChatPiece> pieces =
      render_chat(t_, messages, bos_, eos_, add_generation_prompt, enable_thinking_);
  // An added token with lstrip/rstrip takes the whitespace beside it (Phi-3's role tokens).
  strip_beside_specials(pieces);
  ChatSample out;
  Sample& s = out.sample;
  auto emit = [&](const std::vector<int32_t>& ids, size_t from, size_t to, const ChatPiece& p) {
    for (size_t k = from; k < to; ++k) {
      s.ids.push_back(ids[k]);
      s.mask.push_back(train_on_all || p.assistant ? 1 : 0);
    }
    if (p.turn_end) out.turn_ends.push_back(static_cast<int64_t>(s.ids.size()));
  };
  for (size_t i = 0; i < pieces.size();) {
    if (pieces[i].special) {
      emit({special_id(pieces[i].text)}, 0, 1, pieces[i]);
      ++i;
      continue;
    }
    size_t j = i;  // the run of text pieces [i, j) between two special tokens
    std::string run;
    std::vector<size_t> ends;  // each piece's end offset in run
    for (; j < pieces.size() && !pieces[j].special; ++j)
      ends.push_back((run += pieces[j].text).size());
    const auto ids = tok_.encode_run(run, /*after_special=*/i > 0);
    size_t from = 0;
    for (size_t k = i; k < j; ++k) {
      size_t to = ids.size();
      const bool last = k + 1 == j;
      if (!last && (pieces[k].assistant != pieces[k + 1].assistant || pieces[k].turn_end)) {
        const auto head = tok_.encode_run(run.substr(0, ends[k - i]), i > 0);
        to = 0;
        while (to < head.size() && to < ids.size() && head[to] == ids[to]) ++to;
        to = std::max(to, from);
      } else if (!last) {
        to = from;  // no boundary needed: the next piece takes these tokens
      }
      emit(ids, from, to, pieces[k]);
      from = to;
    }
    i = j;
  }
  return out;
}

ChatFit fit_chat(ChatSample& s, int64_t seq_len, int64_t* turns_dropped) {
  *turns_dropped = 0;
  const int64_t n = static_cast<int64_t>(s.sample.ids.size());
  if (n <= seq_len) return ChatFit::kWhole;
  int64_t cut = 0, kept = 0;
  for (int64_t e : s.turn_ends)
    if (e <= seq_len) {
      cut = e;
      ++kept;
    }
  const ChatFit fit = cut > 0 ? ChatFit::kCutAtTurn : ChatFit::kTruncated;
  if (cut == 0)
    cut = seq_len;
  else
    *turns_dropped = static_cast<int64_t>(s.turn_ends.size()) - kept;
  s.sample.ids.resize(cut);
  s.sample.mask.resize(cut);
  return fit;
}

}  // namespace shardtrain::data
