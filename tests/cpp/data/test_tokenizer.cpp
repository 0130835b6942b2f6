// Tokenizer parity with Python's sentencepiece (tests/python/tokenizer_reference.py): the same
// model file must give identical ids, and decode(encode(x)) must equal Python's decode. The model
// file's SHA-256 (the tokenizer_sha256 prepare records) against hashlib's digest of the same file,
// and the SHA-256 itself against the FIPS 180-2 test vectors.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include <sentencepiece_processor.h>

#include "shardtrain/data/sentencepiece_proto.h"
#include "shardtrain/data/tokenizer.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/sha256.h"
#include "test_paths.h"

using namespace shardtrain;

namespace {
nlohmann::json cases() {
  std::ifstream in(std::string(SHARDTRAIN_REF_DIR) + "/tokenizer/tokenizer_cases.json");
  return nlohmann::json::parse(in);
}
}  // namespace

TEST(Tokenizer, IdsAndDecodeMatchPythonSentencepiece) {
  const auto j = cases();
  std::map<std::string, data::Tokenizer> toks;
  for (const auto& [name, path] : j["models"].items())
    toks.emplace(name, data::Tokenizer(path.get<std::string>()));
  ASSERT_EQ(toks.size(), 2u);  // a freshly trained model and the shipped demo model
  int checked = 0, long_lines = 0, empty = 0;
  for (const auto& c : j["cases"]) {
    const data::Tokenizer& tok = toks.at(c["model"].get<std::string>());
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
  data::Tokenizer tok(std::string(SHARDTRAIN_SOURCE_DIR) + "/data/demo/tokenizer.model");
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_EQ(tok.vocab_size(), 512);
  EXPECT_EQ(tok.encode(""), (std::vector<int32_t>{1}));
  const auto ids = tok.encode("7 1 8", true, true);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(ids.back(), 2);
  EXPECT_EQ(tok.encode("7 1 8", false).size() + 2, ids.size());
  EXPECT_EQ(tok.decode(ids), "7 1 8");  // specials are skipped
}

TEST(Tokenizer, Sha256OfTheModelFileEqualsHashlib) {
  const auto j = cases();
  const auto& want =
      j.at("sha256");  // hashlib.sha256(file bytes), written by tokenizer_reference.py
  ASSERT_EQ(want.size(), 2u);
  for (const auto& [name, path] : j["models"].items()) {
    const data::Tokenizer tok(path.get<std::string>());
    EXPECT_EQ(tok.sha256(), want.at(name).get<std::string>()) << name;
    EXPECT_EQ(runtime::sha256_file(path.get<std::string>()), want.at(name).get<std::string>())
        << name;
  }
}

// FIPS 180-2, appendix B (the NIST example messages and their digests).
TEST(Sha256, Fips180Vectors) {
  EXPECT_EQ(runtime::sha256_hex("", 0),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(runtime::sha256_hex("abc", 3),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string two_blocks =
      "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";  // 448 bits
  ASSERT_EQ(two_blocks.size(), 56u);
  EXPECT_EQ(runtime::sha256_hex(two_blocks.data(), two_blocks.size()),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const std::string million_a(1000000, 'a');
  const std::string million_a_digest =
      "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
  EXPECT_EQ(runtime::sha256_hex(million_a.data(), million_a.size()), million_a_digest);
  // The same message fed in uneven pieces that straddle the 64-byte blocks.
  runtime::Sha256 h;
  size_t fed = 0;
  for (size_t piece = 1; fed < million_a.size(); piece = piece % 131 + 1) {
    const size_t n = std::min(piece, million_a.size() - fed);
    h.update(million_a.data() + fed, n);
    fed += n;
  }
  EXPECT_EQ(h.hex(), million_a_digest);
  // And read from a file.
  std::filesystem::create_directories(SHARDTRAIN_TEST_TMP);
  const std::string path = std::string(SHARDTRAIN_TEST_TMP) + "/million_a.txt";
  std::ofstream(path, std::ios::binary) << million_a;
  EXPECT_EQ(runtime::sha256_file(path), million_a_digest);
}

TEST(Tokenizer, BadFilesAreUsageErrors) {
  EXPECT_THROW(data::Tokenizer("/nonexistent/tokenizer.model"), runtime::UsageError);
  const std::string junk = std::string(SHARDTRAIN_TEST_TMP) + "/junk.model";
  std::filesystem::create_directories(SHARDTRAIN_TEST_TMP);
  std::ofstream(junk) << "not a protobuf";
  EXPECT_THROW(data::Tokenizer{junk}, runtime::UsageError);
}

// A run after a special token under legacy=false: the model re-read without its "▁" prefix gives
// what Python's sentencepiece gives the model edited through its protobuf classes.
TEST(Tokenizer, ModelWithoutDummyPrefixMatchesPythonEdit) {
  const auto j = cases();
  std::ifstream in(j["models"]["shipped"].get<std::string>(), std::ios::binary);
  const std::string proto((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.LoadFromSerializedProto(data::without_dummy_prefix(proto)).ok());
  int differs_from_prefixed = 0;
  sentencepiece::SentencePieceProcessor orig;
  ASSERT_TRUE(orig.LoadFromSerializedProto(proto).ok());
  ASSERT_GE(j["no_prefix"].size(), 30u);
  for (const auto& c : j["no_prefix"]) {
    std::vector<int> ids, prefixed;
    ASSERT_TRUE(sp.Encode(c["text"].get<std::string>(), &ids).ok());
    ASSERT_TRUE(orig.Encode(c["text"].get<std::string>(), &prefixed).ok());
    EXPECT_EQ(ids, c["ids"].get<std::vector<int>>()) << c["text"];
    differs_from_prefixed += ids != prefixed;
  }
  EXPECT_GT(differs_from_prefixed, 20);  // the edit took
  EXPECT_THROW(data::without_dummy_prefix(std::string("\x0a\xff", 2)), runtime::Error);
}

// A SentencePiece model with its tokenizer_config.json is read as transformers reads the
// directory: added and special tokens written in the text are split out (lstrip/rstrip taking the
// whitespace beside them), and "▁" goes where legacy and add_prefix_space put it.
TEST(Tokenizer, ModelDirectoriesEncodeAsAutoTokenizer) {
  const auto j = cases();
  std::map<std::string, data::Tokenizer> toks;
  int checked = 0, unlike_sentencepiece = 0;
  for (const auto& c : j["dirs"]) {
    const std::string dir = c["dir"];
    if (!toks.count(dir)) toks.emplace(dir, data::Tokenizer(dir));
    const std::string text = c["text"];
    const auto got = toks.at(dir).encode(text);
    EXPECT_EQ(got, c["ids"].get<std::vector<int32_t>>()) << dir << " text: '" << text << "'";
    unlike_sentencepiece += got != c["sp_ids"].get<std::vector<int32_t>>();
    ++checked;
  }
  EXPECT_EQ(toks.size(), 5u);
  EXPECT_GE(checked, 70);
  EXPECT_GE(unlike_sentencepiece, 30);  // the cases reach what SentencePiece alone gets wrong
}
