// Chat records: OpenAI / Hugging Face "messages" ({"role", "content"}) and ShareGPT
// "conversations" ({"from", "value"}), read into one list of turns and checked for role order.
#pragma once
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace shardtrain::data {

enum class ChatRole { kSystem, kUser, kAssistant };
const char* role_name(ChatRole r);  // "system", "user", "assistant"

struct ChatMessage {
  ChatRole role = ChatRole::kUser;
  std::string content;
};

struct ChatParse {
  bool ok = false;
  // A record prepare refuses (exit 2) whatever --strict says: roles out of order, empty
  // messages, an unknown role, a content that is not a string. Otherwise a skip reason.
  bool fatal = false;
  std::string reason, detail;
  std::vector<ChatMessage> messages;
};

// True when a record holds "messages" or "conversations" (for --format auto).
bool is_chat_record(const nlohmann::json& record);

// Reads and checks one record: an optional leading system message, then user and assistant
// alternating from user. A record without a list key is skipped as "missing field"; one with
// no assistant turn as "no assistant turn".
ChatParse parse_chat(const nlohmann::json& record);

}  // namespace shardtrain::data
