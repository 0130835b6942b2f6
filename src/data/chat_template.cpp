#include "shardtrain/data/chat_template.h"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "shardtrain/runtime/error.h"

namespace fs = std::filesystem;

namespace shardtrain::data {

ChatTemplate parse_chat_template(const std::string& s) {
  if (const auto t = runtime::parse_enum(kChatTemplateNames, s)) return *t;
  throw runtime::UsageError("--chat-template must be " + runtime::enum_choices(kChatTemplateNames) +
                            ", got '" + s + "'");
}

const char* chat_template_name(ChatTemplate t) { return runtime::enum_name(kChatTemplateNames, t); }

namespace {

bool has(const std::string& s, const char* what) { return s.find(what) != std::string::npos; }

const char* const kPass =
    "; pass --chat-template llama2, llama3, mistral, chatml, qwen3, gemma, gemma2, phi3, phi4 or "
    "tulu";

}  // namespace

ChatTemplate recognise_chat_template(const std::string& j, std::string* why) {
  auto refuse = [&](const char* what) {
    if (why) *why = what;
    return ChatTemplate::kAuto;
  };
  if (has(j, "<|start_header_id|>") && has(j, "<|eot_id|>")) {
    // Llama-3.1 and later add "Cutting Knowledge Date" lines to the system turn: not Llama-3's
    // rendering.
    if (has(j, "Cutting Knowledge Date"))
      return refuse(
          "Llama-3.1's or later (it adds \"Cutting Knowledge Date\" lines), which is not "
          "implemented");
    return ChatTemplate::kLlama3;
  }
  if (has(j, "<start_of_turn>") && has(j, "<end_of_turn>")) {
    if (has(j, "first_user_prefix")) return ChatTemplate::kGemma;
    if (has(j, "System role not supported")) return ChatTemplate::kGemma2;
    return refuse("a Gemma template other than Gemma 2-it's or Gemma 3-it's");
  }
  if (has(j, "<|user|>") && has(j, "<|assistant|>") && has(j, "<|end|>")) {
    // Phi-3-mini's first template and Phi-3-small's open with bos_token; Phi-3-medium's has no
    // system turn and puts <|assistant|> after each user turn.
    if (!has(j, "bos_token") && has(j, "<|system|>")) return ChatTemplate::kPhi3;
    return refuse("a Phi-3 template other than Phi-3-mini-instruct's current one or Phi-3.5's");
  }
  // Phi-4-mini-instruct's builds each role token from the role's name, with no newline after it.
  if (has(j, "<|end|>") && has(j, "'<|' + message['role'] + '|>' + message['content']")) {
    if (!has(j, "{{ '<|assistant|>' }}"))
      return refuse("a Phi-4 template other than Phi-4-mini-instruct's");
    return ChatTemplate::kPhi4;
  }
  // OLMo 2-Instruct's (Tülu 3's turns): role markers as plain text, EOS closing each answer.
  if (has(j, "'<|user|>\\n' + message['content'] + '\\n'") && has(j, "eos_token")) {
    if (!has(j, "{{ bos_token }}") || !has(j, "message['content'] + eos_token + '\\n'"))
      return refuse("a Tülu template other than OLMo 2-Instruct's");
    return ChatTemplate::kTulu;
  }
  if (has(j, "<|im_start|>") && has(j, "reasoning_content") && has(j, "last_query_index")) {
    // Qwen3's (hybrid thinking); Qwen3-2507's thinking-only models open <think> themselves.
    if (has(j, "enable_thinking")) return ChatTemplate::kQwen3;
    return refuse(
        "a Qwen3 template without enable_thinking (a 2507 release), which is not "
        "implemented");
  }
  if (has(j, "<|im_start|>")) {
    if (has(j, "You are Qwen, created by Alibaba Cloud"))
      return refuse(
          "Qwen2.5's (its default system prompt differs from Qwen2's), which is not implemented");
    if (has(j, "You are a helpful assistant.")) return ChatTemplate::kChatml;
    return refuse(
        "a ChatML template other than Qwen2's (no default system prompt \"You are a helpful "
        "assistant.\")");
  }
  if (has(j, "[INST]") && has(j, "<<SYS>>")) return ChatTemplate::kLlama2;
  if (has(j, "[INST]")) {
    if (has(j, "[AVAILABLE_TOOLS]") || has(j, "[SYSTEM_PROMPT]"))
      return refuse("Mistral v0.3's or later (tools, [SYSTEM_PROMPT]), which is not implemented");
    // v0.1/v0.2 as the Hub has them now: ' [INST] ' with a leading space; the first release had
    // none.
    if (has(j, " [INST] ")) return ChatTemplate::kMistral;
    return refuse(
        "an earlier Mistral template ('[INST] ' without the leading space), which is not "
        "implemented");
  }
  return refuse(
      "not one of Llama-2-chat's, Llama-3-Instruct's, Mistral-Instruct v0.1/v0.2's, "
      "Qwen2-Instruct's, Qwen3's, Gemma 2-it's, Gemma 3-it's, Phi-3-instruct's, "
      "Phi-4-mini-instruct's or OLMo 2-Instruct's");
}

ChatTemplate detect_chat_template(const std::string& tokenizer_file) {
  const fs::path dir = fs::path(tokenizer_file).parent_path();
  std::error_code ec;
  std::string jinja, source;
  const fs::path jinja_file =
      dir / "chat_template.jinja";  // transformers' newer saves keep it beside the config
  const fs::path config_file = dir / "tokenizer_config.json";
  if (fs::is_regular_file(jinja_file, ec)) {
    std::ifstream in(jinja_file, std::ios::binary);
    std::ostringstream os;
    os << in.rdbuf();
    jinja = os.str();
    source = jinja_file.string();
  } else if (fs::is_regular_file(config_file, ec)) {
    std::ifstream in(config_file);
    const nlohmann::json c = nlohmann::json::parse(in, nullptr, false);
    source = config_file.string() + "'s chat_template";
    const auto it = c.is_object() ? c.find("chat_template") : c.end();
    if (c.is_object() && it != c.end()) {
      if (it->is_string()) jinja = it->get<std::string>();
      if (it->is_array())  // named templates: transformers uses "default"
        for (const auto& t : *it)
          if (t.is_object() && t.value("name", "") == "default" && t.contains("template") &&
              t["template"].is_string())
            jinja = t["template"].get<std::string>();
    }
    if (jinja.empty())
      throw runtime::UsageError("--chat-template auto: " + config_file.string() +
                                " has no chat_template" + kPass);
  } else {
    throw runtime::UsageError("--chat-template auto: no tokenizer_config.json beside " +
                              tokenizer_file + " to take the chat template from" + kPass);
  }
  std::string why;
  const ChatTemplate t = recognise_chat_template(jinja, &why);
  if (t == ChatTemplate::kAuto)
    throw runtime::UsageError("--chat-template auto: " + source + " is " + why + kPass);
  return t;
}

namespace {

// The code point starting at s[i] (UTF-8, already validated), and its length.
uint32_t code_point(std::string_view s, size_t i, size_t* len) {
  const auto c = static_cast<unsigned char>(s[i]);
  const int n = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : 3;
  uint32_t cp = n == 0 ? c : n == 1 ? (c & 0x1F) : n == 2 ? (c & 0x0F) : (c & 0x07);
  for (int k = 1; k <= n && i + k < s.size(); ++k)
    cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  *len = static_cast<size_t>(n) + 1;
  return cp;
}

// Python's str.isspace(): bidirectional class WS, B or S, or category Zs.
bool py_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

}  // namespace

std::string python_strip(std::string_view s) {
  size_t b = 0, e = s.size(), len = 0;
  while (b < e && py_space(code_point(s, b, &len))) b += len;
  while (e > b) {
    size_t start = e - 1;
    while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    if (!py_space(code_point(s, start, &len))) break;
    e = start;
  }
  return std::string(s.substr(b, e - b));
}

namespace {

struct Out {
  std::vector<ChatPiece> pieces;
  void text(std::string t, bool assistant = false, bool turn_end = false) {
    if (!t.empty() || turn_end) pieces.push_back({std::move(t), false, assistant, turn_end});
  }
  void special(const std::string& t, bool assistant = false, bool turn_end = false) {
    if (!t.empty()) pieces.push_back({t, true, assistant, turn_end});
  }
};

bool has_system(const std::vector<ChatMessage>& m) {
  return !m.empty() && m.front().role == ChatRole::kSystem;
}

// One turn of the templates that wrap each message in their own tokens: open, the header text,
// the content (the loss's where `assistant`), close (also the loss's), `after` (a newline but in
// Phi-4's); `cut`: a dialogue may be cut after it.
void turn(Out& o, const std::string& open, const std::string& header, const std::string& content,
          const std::string& close, bool assistant, bool cut, const char* after = "\n") {
  o.special(open);
  o.text(header);
  o.text(content, assistant);
  o.special(close, assistant);
  o.text(after, false, cut);
}

// Llama-2-chat: <s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {answer} </s>, contents
// stripped.
void llama2(Out& o, const std::vector<ChatMessage>& m, const std::string& bos,
            const std::string& eos) {
  const bool sys = has_system(m);
  for (size_t i = sys ? 1 : 0; i < m.size(); ++i) {
    std::string content = m[i].content;
    if (sys && i == 1) content = "<<SYS>>\n" + m[0].content + "\n<</SYS>>\n\n" + content;
    if (m[i].role == ChatRole::kUser) {
      o.special(bos);
      o.text("[INST] " + python_strip(content) + " [/INST]");
    } else {
      o.text(" " + python_strip(content) + " ", true);
      o.special(eos, true, true);
    }
  }
}

// Meta-Llama-3-8B-Instruct: <|begin_of_text|> then per message
// <|start_header_id|>{role}<|end_header_id|>\n\n{content | trim}<|eot_id|>.
void llama3(Out& o, const std::vector<ChatMessage>& m, const std::string& bos) {
  for (size_t i = 0; i < m.size(); ++i) {
    const bool a = m[i].role == ChatRole::kAssistant;
    if (i == 0) o.special(bos);
    o.special("<|start_header_id|>");
    o.text(role_name(m[i].role));
    o.special("<|end_header_id|>");
    o.text("\n\n");
    o.text(python_strip(m[i].content), a);
    o.special("<|eot_id|>", a, a);
  }
}

// Mistral-7B-Instruct-v0.1/v0.2: <s> [INST] {system}\n\n{user} [/INST] {answer}</s> [INST] ...
void mistral(Out& o, const std::vector<ChatMessage>& m, const std::string& bos,
             const std::string& eos) {
  const bool sys = has_system(m);
  o.special(bos);
  for (size_t i = sys ? 1 : 0; i < m.size(); ++i) {
    if (m[i].role == ChatRole::kUser) {
      o.text(" [INST] " + (sys && i == 1 ? m[0].content + "\n\n" : std::string()) + m[i].content +
             " [/INST]");
    } else {
      o.text(" " + m[i].content, true);
      o.special(eos, true, true);
    }
  }
}

// Qwen2-7B-Instruct: <|im_start|>{role}\n{content}<|im_end|>\n, with a default system message.
void chatml(Out& o, const std::vector<ChatMessage>& m) {
  if (!has_system(m))
    turn(o, "<|im_start|>", "system\n", "You are a helpful assistant.", "<|im_end|>", false, false);
  for (const auto& msg : m) {
    const bool a = msg.role == ChatRole::kAssistant;
    turn(o, "<|im_start|>", std::string(role_name(msg.role)) + "\n", msg.content, "<|im_end|>", a,
         a);
  }
}

// Python's str.strip(chars), lstrip and rstrip for '\n' only (the Jinja template's .strip('\n')).
std::string strip_newlines(std::string s, bool left, bool right) {
  while (right && !s.empty() && s.back() == '\n') s.pop_back();
  size_t b = 0;
  while (left && b < s.size() && s[b] == '\n') ++b;
  return s.substr(b);
}

// Qwen3: ChatML turns without a default system message. An assistant message's reasoning is the
// text before "</think>" (after any "<think>"); turns after the last user turn render it as
// <think>\n...\n</think>\n\n before the answer, the last one even when empty.
void qwen3(Out& o, const std::vector<ChatMessage>& m) {
  const auto is_query = [](const ChatMessage& msg) {
    const std::string& c = msg.content;
    const std::string open = "<tool_response>", close = "</tool_response>";
    const bool tool = c.compare(0, open.size(), open) == 0 && c.size() >= close.size() &&
                      c.compare(c.size() - close.size(), close.size(), close) == 0;
    return msg.role == ChatRole::kUser && !tool;
  };
  size_t last_query = m.size() - 1;
  for (size_t i = m.size(); i-- > 0;)
    if (is_query(m[i])) {
      last_query = i;
      break;
    }
  for (size_t i = 0; i < m.size(); ++i) {
    const std::string header = std::string(role_name(m[i].role)) + "\n";
    if (m[i].role != ChatRole::kAssistant) {
      turn(o, "<|im_start|>", header, m[i].content, "<|im_end|>", false, false);
      continue;
    }
    std::string content = m[i].content, reasoning;
    const size_t end = content.find("</think>");
    if (end != std::string::npos) {
      reasoning = strip_newlines(content.substr(0, end), false, true);
      const size_t open = reasoning.rfind("<think>");
      if (open != std::string::npos) reasoning = reasoning.substr(open + 7);
      reasoning = strip_newlines(reasoning, true, false);
      content = strip_newlines(content.substr(content.rfind("</think>") + 8), true, false);
    }
    // A dialogue cut after this turn renders it alike only where it keeps its block either way.
    const bool think = i > last_query && (i + 1 == m.size() || !reasoning.empty());
    if (think)
      content = "<think>\n" + strip_newlines(reasoning, true, true) + "\n</think>\n\n" +
                strip_newlines(content, true, false);
    turn(o, "<|im_start|>", header, content, "<|im_end|>", true, think);
  }
}

// Gemma-it: <bos><start_of_turn>{user|model}\n{content | trim}<end_of_turn>\n; Gemma 3 opens the
// first turn with the system message and two newlines.
void gemma(Out& o, const std::vector<ChatMessage>& m, const std::string& bos, bool system_ok) {
  const bool sys = has_system(m);
  if (sys && !system_ok)
    throw runtime::UsageError(
        "Gemma 2's chat template refuses a system message (\"System role not supported\"); "
        "drop it from the data or pass --chat-template gemma (Gemma 3's, which prepends it)");
  o.special(bos);
  for (size_t i = sys ? 1 : 0; i < m.size(); ++i) {
    const bool a = m[i].role == ChatRole::kAssistant;
    turn(o, "<start_of_turn>",
         std::string(a ? "model" : "user") + "\n" +
             (sys && i == 1 ? m[0].content + "\n\n" : std::string()),
         python_strip(m[i].content), "<end_of_turn>", a, a);
  }
}

// Phi-3-mini-instruct, Phi-3.5: <|{role}|>\n{content}<|end|>\n per message, then EOS (the
// generation prompt <|assistant|>\n instead).
// Phi-4-mini-instruct: the same without the newlines.
void phi(Out& o, const std::vector<ChatMessage>& m, const std::string& eos,
         bool add_generation_prompt, const char* newline) {
  for (const auto& msg : m)
    turn(o, std::string("<|") + role_name(msg.role) + "|>", newline, msg.content, "<|end|>",
         msg.role == ChatRole::kAssistant, false, newline);
  if (add_generation_prompt) {
    o.special("<|assistant|>");
    o.text(newline);
  } else {
    // A dialogue cut earlier would render without this EOS: only the whole one ends a turn.
    o.special(eos, false, !m.empty() && m.back().role == ChatRole::kAssistant);
  }
}

// OLMo 2-Instruct: BOS, then <|{role}|>\n{content}\n per message, an answer ending in EOS instead
// of the newline (EOS and a newline when a turn follows); the generation prompt <|assistant|>\n.
void tulu(Out& o, const std::vector<ChatMessage>& m, const std::string& bos, const std::string& eos,
          bool add_generation_prompt) {
  o.special(bos);
  for (size_t i = 0; i < m.size(); ++i) {
    const bool a = m[i].role == ChatRole::kAssistant;
    o.text(std::string("<|") + role_name(m[i].role) + "|>\n");
    o.text(m[i].content, a);
    if (a) {
      o.special(eos, true, true);
      if (i + 1 < m.size()) o.text("\n");
    } else {
      o.text("\n");
    }
  }
  if (add_generation_prompt && !m.empty()) o.text("<|assistant|>\n");
}

}  // namespace

std::vector<ChatPiece> render_chat(ChatTemplate t, const std::vector<ChatMessage>& messages,
                                   const std::string& bos, const std::string& eos,
                                   bool add_generation_prompt, bool enable_thinking) {
  Out o;
  switch (t) {
    case ChatTemplate::kLlama2:
      llama2(o, messages, bos, eos);
      break;
    case ChatTemplate::kLlama3:
      llama3(o, messages, bos);
      if (add_generation_prompt) {
        o.special("<|start_header_id|>");
        o.text("assistant");
        o.special("<|end_header_id|>");
        o.text("\n\n");
      }
      break;
    case ChatTemplate::kMistral:
      mistral(o, messages, bos, eos);
      break;
    case ChatTemplate::kChatml:
      chatml(o, messages);
      if (add_generation_prompt) {
        o.special("<|im_start|>");
        o.text("assistant\n");
      }
      break;
    case ChatTemplate::kQwen3:
      qwen3(o, messages);  // a first system message renders as any turn does
      if (add_generation_prompt) {
        o.special("<|im_start|>");
        o.text(enable_thinking ? "assistant\n" : "assistant\n<think>\n\n</think>\n\n");
      }
      break;
    case ChatTemplate::kGemma:
    case ChatTemplate::kGemma2:
      gemma(o, messages, bos, t == ChatTemplate::kGemma);
      if (add_generation_prompt) {
        o.special("<start_of_turn>");
        o.text("model\n");
      }
      break;
    case ChatTemplate::kPhi3:
    case ChatTemplate::kPhi4:
      phi(o, messages, eos, add_generation_prompt, t == ChatTemplate::kPhi3 ? "\n" : "");
      break;
    case ChatTemplate::kTulu:
      tulu(o, messages, bos, eos, add_generation_prompt);
      break;
    default:
      throw runtime::Error("render_chat: the chat template is not resolved");
  }
  return std::move(o.pieces);
}

}  // namespace shardtrain::data
