// Tokenizer parity with Python's sentencepiece (tests/python/tokenizer_reference.py): the same
// model file must give identical ids, and decode(encode(x)) must equal Python's decode.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "shardtrain/data/tokenizer.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/sha256.h"

using namespace shardtrain;

namespace {
nlohmann::json cases() {
  std::ifstream in(std::string(SHARDTRAIN_REF_DIR) + "/tokenizer/tokenizer_cases.json");
  return nlohmann::json::parse(in);
}
}  // namespace

TEST(Tokenizer, IdsAndDecodeMatchPythonSentencepiece) {
  const auto j = cases();
  std::map<std::string, Tokenizer> toks;
  for (const auto& [name, path] : j["models"].items()) toks.emplace(name, Tokenizer(path.get<std::string>()));
  ASSERT_EQ(toks.size(), 2u);  // a freshly trained model and the shipped demo model
  int checked = 0, long_lines = 0, empty = 0;
  for (const auto& c : j["cases"]) {
    const Tokenizer& tok = toks.at(c["model"].get<std::string>());
    const std::string text = c["text"];
    const auto want = c["ids"].get<std::vector<int32_t>>();
    const auto got = tok.encode(text);
    EXPECT_EQ(got, want) << c["model"] << " text: '" << text.substr(0, 80) << "'";
    EXPECT_EQ(tok.decode(got), c["decoded"].get<std::string>()) << "'" << text.substr(0, 80) << "'";
    ++checked, long_lines += text.size() > 10000, empty += text.empty();
  }
  EXPECT_GE(checked, 60);
  EXPECT_GE(long_lines, 1);
  EXPECT_GE(empty, 1);
}

TEST(Tokenizer, BosByDefaultEosOnRequestLikeLlamaTokenizer) {
  Tokenizer tok(std::string(SHARDTRAIN_SOURCE_DIR) + "/data/demo/tokenizer.model");
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_EQ(tok.vocab_size(), 512);
  EXPECT_EQ(tok.encode(""), (std::vector<int32_t>{1}));
  const auto ids = tok.encode("7 1 8", true, true);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(ids.back(), 2);
  EXPECT_EQ(tok.encode("7 1 8", false).size() + 2, ids.size());
  EXPECT_EQ(tok.decode(ids), "7 1 8");  // specials are skipped
  EXPECT_EQ(tok.sha256(), sha256_file(tok.path()));
}

TEST(Tokenizer, BadFilesAreUsageErrors) {
  EXPECT_THROW(Tokenizer("/nonexistent/tokenizer.model"), UsageError);
  const std::string junk = std::string(SHARDTRAIN_TEST_TMP) + "/junk.model";
  std::filesystem::create_directories(SHARDTRAIN_TEST_TMP);
  std::ofstream(junk) << "not a protobuf";
  EXPECT_THROW(Tokenizer{junk}, UsageError);
}
