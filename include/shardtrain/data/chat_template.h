// The chat templates of four model families, rendered in C++ exactly as transformers'
// apply_chat_template renders their Jinja templates, cut into pieces that say which text is
// an assistant turn (trained on) and which text is one of the template's special tokens.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "shardtrain/data/chat.h"
#include "shardtrain/runtime/enum_names.h"

namespace shardtrain::data {

// kLlama2: Llama-2-7b-chat-hf's template. kLlama3: Meta-Llama-3-8B-Instruct's (Llama-3.0, without
// Llama-3.1's "Cutting Knowledge Date" system lines). kMistral: Mistral-7B-Instruct-v0.1's and
// v0.2's (system message prepended to the first user message). kChatml: Qwen2-7B-Instruct's
// (default system "You are a helpful assistant."). kQwen3: Qwen3's (no default system; an
// assistant turn after the last user turn keeps its <think> block, earlier ones lose it).
// kGemma: Gemma 3-it's (the system message opens the first user turn; "model" for the
// assistant); kGemma2: Gemma 2-it's (the same turns; a system message is refused, as its
// template raises). kPhi3: Phi-3-mini-instruct's and Phi-3.5's (<|role|>\n{content}<|end|>\n,
// then EOS). kPhi4: Phi-4-mini-instruct's (<|role|>{content}<|end|>, then EOS). kTulu: OLMo
// 2-Instruct's (Tülu's <|role|>\n turns in plain text, each answer ending in EOS, after BOS).
enum class ChatTemplate {
  kAuto,
  kLlama2,
  kLlama3,
  kMistral,
  kChatml,
  kQwen3,
  kGemma,
  kGemma2,
  kPhi3,
  kPhi4,
  kTulu
};
inline constexpr runtime::EnumName<ChatTemplate> kChatTemplateNames[] = {
    {ChatTemplate::kLlama2, "llama2"},   {ChatTemplate::kLlama3, "llama3"},
    {ChatTemplate::kMistral, "mistral"}, {ChatTemplate::kChatml, "chatml"},
    {ChatTemplate::kQwen3, "qwen3"},     {ChatTemplate::kGemma, "gemma"},
    {ChatTemplate::kGemma2, "gemma2"},   {ChatTemplate::kPhi3, "phi3"},
    {ChatTemplate::kPhi4, "phi4"},       {ChatTemplate::kTulu, "tulu"},
    {ChatTemplate::kAuto, "auto"}};
ChatTemplate parse_chat_template(const std::string& s);  // throws UsageError naming --chat-template
const char* chat_template_name(ChatTemplate t);

// --chat-template auto: the family whose template the tokenizer directory's tokenizer_config.json
// holds as chat_template, recognised by its markers. tokenizer_file: the resolved tokenizer file
// (its directory holds the config). Throws UsageError naming the file when it cannot tell.
ChatTemplate detect_chat_template(const std::string& tokenizer_file);
// Which family a chat_template string is; kAuto when none. why: for a refusal, what was seen.
ChatTemplate recognise_chat_template(const std::string& jinja, std::string* why);

struct ChatPiece {
  std::string text;
  bool special =
      false;  // one token of the template's own (BOS, EOS, <|eot_id|>, <|im_start|>, ...)
  bool assistant = false;  // an assistant turn's content and end-of-turn token: the loss covers it
  bool turn_end = false;  // the end of an assistant message's rendering: a dialogue may be cut here
};

// messages must be in the order parse_chat checks. bos/eos: the tokenizer's BOS and EOS token
// text (bos_token and eos_token in the templates); bos "" when it has none.
// add_generation_prompt: the templates' own (Llama-3's, Qwen's and Gemma's assistant header;
// Llama-2's and Mistral's templates have none and render nothing more). enable_thinking = false:
// Qwen3's generation prompt closes an empty <think> block (its template's enable_thinking).
std::vector<ChatPiece> render_chat(ChatTemplate t, const std::vector<ChatMessage>& messages,
                                   const std::string& bos, const std::string& eos,
                                   bool add_generation_prompt = false, bool enable_thinking = true);

// Python's str.strip(): Jinja's trim filter and .strip() drop Unicode whitespace at both ends.
std::string python_strip(std::string_view s);

}  // namespace shardtrain::data
