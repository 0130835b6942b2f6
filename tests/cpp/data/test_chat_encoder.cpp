// Qwen3's generation prompts (a preference record's prompt) against transformers'
// apply_chat_template(add_generation_prompt=True, enable_thinking=...)
// (tests/python/chat_reference.py), and --no-thinking refused for a template without
// enable_thinking.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "shardtrain/data/chat_tokenize.h"
#include "shardtrain/runtime/error.h"
#include "test_paths.h"

using namespace shardtrain;

TEST(ChatEncoder, Qwen3GenerationPromptsWithAndWithoutThinking) {
  std::ifstream in(std::string(SHARDTRAIN_REF_DIR) + "/chat/chat_cases.json");
  const auto j = nlohmann::json::parse(in)["families"]["qwen3"];
  const data::Tokenizer tok(j["dir"].get<std::string>());
  const data::ChatEncoder thinking(tok, data::ChatTemplate::kQwen3, true);
  const data::ChatEncoder plain(tok, data::ChatTemplate::kQwen3, false);
  int off = 0;
  for (const auto& p : j["prompts"]) {
    std::vector<data::ChatMessage> msgs;
    for (const auto& m : p["messages"]) {
      const std::string role = m["role"];
      msgs.push_back({role == "system"      ? data::ChatRole::kSystem
                      : role == "assistant" ? data::ChatRole::kAssistant
                                            : data::ChatRole::kUser,
                      m["content"].get<std::string>()});
    }
    const bool think = p["enable_thinking"];
    const auto got = (think ? thinking : plain).encode(msgs, false, true).sample.ids;
    EXPECT_EQ(got, p["ids"].get<std::vector<int32_t>>()) << p["messages"].dump();
    off += !think;
  }
  EXPECT_GE(off, 5);
  EXPECT_THROW(data::ChatEncoder(tok, data::ChatTemplate::kChatml, false), runtime::UsageError);
}
