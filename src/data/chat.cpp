#include "shardtrain/data/chat.h"

#include <nlohmann/json.hpp>

namespace shardtrain::data {

const char* role_name(ChatRole r) {
  switch (r) {
    case ChatRole::kSystem:
      return "system";
    case ChatRole::kUser:
      return "user";
    default:
      return "assistant";
  }
}

bool is_chat_record(const nlohmann::json& record) {
  return record.contains("messages") || record.contains("conversations");
}

namespace {

bool fail(ChatParse& p, bool fatal, const char* reason, std::string detail) {
  p.fatal = fatal;
  p.reason = reason;
  p.detail = std::move(detail);
  return false;
}

// One message of either layout: messages use role/content, ShareGPT uses from/value with human/gpt.
bool read_message(const nlohmann::json& m, bool sharegpt, size_t index, ChatParse& p) {
  const std::string where = "message " + std::to_string(index + 1);
  const char* role_key = sharegpt ? "from" : "role";
  const char* text_key = sharegpt ? "value" : "content";
  if (!m.is_object())
    return fail(p, true, "bad message", where + " is a JSON " + m.type_name() + ", not an object");
  const auto role = m.find(role_key);
  if (role == m.end() || !role->is_string())
    return fail(p, true, "unknown role", where + " has no \"" + role_key + "\" string");
  const std::string r = role->get<std::string>();
  ChatMessage msg;
  if (r == "system")
    msg.role = ChatRole::kSystem;
  else if (r == "user" || (sharegpt && r == "human"))
    msg.role = ChatRole::kUser;
  else if (r == "assistant" || (sharegpt && r == "gpt"))
    msg.role = ChatRole::kAssistant;
  else
    return fail(p, true, "unknown role",
                where + " has " + role_key + " \"" + r + "\"; expected " +
                    (sharegpt ? "system, human or gpt" : "system, user or assistant"));
  const auto text = m.find(text_key);
  if (text == m.end() || !text->is_string())
    return fail(p, true, "content not a string",
                where + "'s \"" + text_key + "\" is " +
                    (text == m.end() ? std::string("missing") : std::string(text->type_name())));
  msg.content = text->get<std::string>();
  p.messages.push_back(std::move(msg));
  return true;
}

// The order every supported template accepts: [system] user assistant user assistant ...
bool check_order(ChatParse& p) {
  for (size_t i = 0; i < p.messages.size(); ++i) {
    const ChatRole r = p.messages[i].role;
    const size_t first = p.messages.front().role == ChatRole::kSystem ? 1 : 0;
    const ChatRole want = i < first              ? ChatRole::kSystem
                          : (i - first) % 2 == 0 ? ChatRole::kUser
                                                 : ChatRole::kAssistant;
    if (r == want) continue;
    std::string detail = "message " + std::to_string(i + 1) + " is " + role_name(r);
    detail += i == 0 ? " first" : std::string(" after ") + role_name(p.messages[i - 1].role);
    return fail(p, true, "roles out of order",
                detail +
                    "; expected an optional leading system message, then user and assistant "
                    "alternating from user");
  }
  return true;
}

}  // namespace

ChatParse parse_chat(const nlohmann::json& record) {
  ChatParse p;
  const bool sharegpt = !record.contains("messages");
  const char* key = sharegpt ? "conversations" : "messages";
  const auto list = record.find(key);
  if (list == record.end()) {
    fail(p, false, "missing field", "no \"messages\" or \"conversations\"");
    return p;
  }
  if (!list->is_array()) {
    fail(p, true, "bad message",
         std::string("\"") + key + "\" is a JSON " + list->type_name() + ", not a list");
    return p;
  }
  if (list->empty()) {
    fail(p, true, "empty messages", std::string("\"") + key + "\" is []");
    return p;
  }
  for (size_t i = 0; i < list->size(); ++i)
    if (!read_message((*list)[i], sharegpt, i, p)) return p;
  if (!check_order(p)) return p;
  bool any_assistant = false;
  for (const auto& m : p.messages) any_assistant |= m.role == ChatRole::kAssistant;
  if (!any_assistant) {
    fail(p, false, "no assistant turn",
         std::to_string(p.messages.size()) + " message(s), none from the assistant");
    return p;
  }
  p.ok = true;
  return p;
}

}  // namespace shardtrain::data
