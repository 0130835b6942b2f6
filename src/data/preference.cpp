#include "shardtrain/data/preference.h"

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>

#include "shardtrain/data/chat.h"
#include "shardtrain/data/chat_tokenize.h"
#include "shardtrain/data/tokenizer.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::data {

bool is_preference_record(const nlohmann::json& record) {
  return record.contains("chosen") && record.contains("rejected");
}

namespace {

bool skip(ParsedLine& p, const char* reason, std::string detail, bool fatal = false) {
  p.reason = reason;
  p.detail = std::move(detail);
  p.fatal = fatal;
  return false;
}

bool blank(const std::string& s) { return s.find_first_not_of(" \t\r\n") == std::string::npos; }

// The prompt's messages followed by one answer's, checked as a chat record is; the answer's
// messages (after the prompt's) must all be the assistant's.
bool conversation(const nlohmann::json& prompt, const nlohmann::json& answer, const char* key,
                  std::vector<ChatMessage>& out, ParsedLine& p) {
  if (!answer.is_array())
    return skip(p, "bad message",
                std::string("\"") + key + "\" is a JSON " + answer.type_name() +
                    ", not a list of messages as \"prompt\" is",
                true);
  if (answer.empty()) return skip(p, "empty answer", std::string("\"") + key + "\" is []");
  nlohmann::json all = prompt;
  for (const auto& m : answer) all.push_back(m);
  ChatParse c = parse_chat(nlohmann::json{{"messages", all}});
  if (!c.ok) return skip(p, c.reason.c_str(), std::string("\"") + key + "\": " + c.detail, c.fatal);
  for (size_t i = prompt.size(); i < c.messages.size(); ++i) {
    if (c.messages[i].role != ChatRole::kAssistant)
      return skip(p, "bad message",
                  std::string("\"") + key + "\" holds a " + role_name(c.messages[i].role) +
                      " message; the answer is the assistant's",
                  true);
    if (blank(c.messages[i].content))
      return skip(p, "empty answer", std::string("\"") + key + "\" has an empty message");
  }
  out.assign(c.messages.begin() + static_cast<std::ptrdiff_t>(prompt.size()), c.messages.end());
  return true;
}

bool same(const std::vector<ChatMessage>& a, const std::vector<ChatMessage>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].role != b[i].role || a[i].content != b[i].content) return false;
  return true;
}

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

Sample with_answer_mask(std::vector<int32_t> ids, size_t prompt_len) {
  Sample s;
  s.mask.assign(ids.size(), 0);
  for (size_t i = std::min(prompt_len, ids.size()); i < ids.size(); ++i) s.mask[i] = 1;
  s.ids = std::move(ids);
  return s;
}

}  // namespace

bool parse_preference(const nlohmann::json& j, ParsedLine& p) {
  Record& r = p.record;
  for (const char* key : {"prompt", "chosen", "rejected"})
    if (!j.contains(key)) return skip(p, "missing field", std::string("no \"") + key + "\"");
  const auto& prompt = j["prompt"];
  if (prompt.is_array()) {
    if (prompt.empty()) return skip(p, "empty prompt", "\"prompt\" is []");
    if (!conversation(prompt, j["chosen"], "chosen", r.chosen_messages, p) ||
        !conversation(prompt, j["rejected"], "rejected", r.rejected_messages, p))
      return false;
    ChatParse c = parse_chat(nlohmann::json{{"messages", prompt}});
    r.messages = std::move(c.messages);  // checked above, with the answers after it
    if (r.messages.empty() || r.messages.back().role != ChatRole::kUser)
      return skip(p, "bad message", "\"prompt\" must end with a user message", true);
    if (same(r.chosen_messages, r.rejected_messages))
      return skip(p, "identical chosen and rejected", "");
    p.ok = true;
    return true;
  }
  for (const char* key : {"prompt", "chosen", "rejected"})
    if (!j[key].is_string())
      return skip(p, "not a string",
                  std::string("\"") + key + "\" is " + j[key].type_name() +
                      (std::string(key) == "prompt" ? "" : " while \"prompt\" is a string"));
  r.prompt = j["prompt"].get<std::string>();
  r.chosen = j["chosen"].get<std::string>();
  r.rejected = j["rejected"].get<std::string>();
  if (blank(r.prompt)) return skip(p, "empty prompt", "\"prompt\" is empty");
  for (const auto* a : {&r.chosen, &r.rejected})
    if (blank(*a))
      return skip(p, "empty answer",
                  std::string("\"") + (a == &r.chosen ? "chosen" : "rejected") + "\" is empty");
  if (r.chosen == r.rejected) return skip(p, "identical chosen and rejected", "");
  p.ok = true;
  return true;
}

PreferenceEncoder::PreferenceEncoder(const Tokenizer& tok, ChatTemplate t, bool enable_thinking)
    : tok_(tok),
      chat_(t == ChatTemplate::kAuto ? nullptr
                                     : std::make_unique<ChatEncoder>(tok, t, enable_thinking)),
      eos_text_(tok.piece(tok.eos_id())) {
  const std::vector<int32_t> own = tok.encode("", /*add_bos=*/true);
  appends_eos_ = !own.empty() && own.back() == tok.eos_id() &&
                 (own.size() > 1 || tok.bos_id() != tok.eos_id());
}

std::vector<int32_t> PreferenceEncoder::encode_answer(const std::string& prompt,
                                                      const std::string& answer) const {
  // TRL appends the EOS text unless the answer ends with it; split out as a special token, it
  // is the EOS id after the text's own ids, before any token the tokenizer appends itself.
  std::string a = answer;
  if (a.size() >= eos_text_.size() &&
      a.compare(a.size() - eos_text_.size(), std::string::npos, eos_text_) == 0)
    a.resize(a.size() - eos_text_.size());
  std::vector<int32_t> ids = tok_.encode(prompt + a, /*add_bos=*/true);
  ids.insert(appends_eos_ ? ids.end() - 1 : ids.end(), tok_.eos_id());
  return ids;
}

PreferencePair PreferenceEncoder::encode(const Record& r) const {
  std::vector<int32_t> prompt, chosen, rejected;
  if (!r.messages.empty()) {
    if (!chat_)
      throw runtime::Error("PreferenceEncoder: a conversational record needs a chat template");
    auto with = [&](const std::vector<ChatMessage>& answer) {
      std::vector<ChatMessage> all = r.messages;
      all.insert(all.end(), answer.begin(), answer.end());
      return chat_->encode(all, /*train_on_all=*/false).sample.ids;
    };
    prompt = chat_->encode(r.messages, false, /*add_generation_prompt=*/true).sample.ids;
    chosen = with(r.chosen_messages);
    rejected = with(r.rejected_messages);
  } else {
    prompt = tok_.encode(r.prompt, /*add_bos=*/true);
    chosen = encode_answer(r.prompt, r.chosen);
    rejected = encode_answer(r.prompt, r.rejected);
  }
  // Where the prompt's ids and both answers' first differ (TRL's common_prefix_length).
  const size_t n = std::min(common_prefix(prompt, chosen), common_prefix(prompt, rejected));
  PreferencePair out;
  out.prompt_tokens = static_cast<int64_t>(n);
  out.chosen = with_answer_mask(std::move(chosen), n);
  out.rejected = with_answer_mask(std::move(rejected), n);
  return out;
}

}  // namespace shardtrain::data
