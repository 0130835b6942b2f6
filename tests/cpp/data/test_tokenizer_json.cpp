// tokenizer.json parity with Hugging Face (tests/python/tokenizer_json_reference.py): byte-level
// BPE tokenizers in Llama-3's and Qwen2's shapes, one with ids past 65,535, GPT-2's ByteLevel after
// Splits of every behavior, and character BPEs with byte_fallback and a fused unk must give
// transformers' ids with and without special tokens, its decodes, and its BOS/EOS/pad ids, on a
// corpus of hard cases. Then every refusal: other model types, fields shardtrain does not
// implement, a vocabulary larger than the model's, and paths that hold no tokenizer.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <tuple>

#include "shardtrain/data/tokenizer.h"
#include "shardtrain/runtime/error.h"
#include "test_paths.h"

using namespace shardtrain;
namespace fs = std::filesystem;

namespace {

const std::string kRef = std::string(SHARDTRAIN_REF_DIR) + "/tokenizer_json";

nlohmann::json cases() {
  std::ifstream in(kRef + "/cases.json");
  return nlohmann::json::parse(in);
}

nlohmann::json read(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// A fresh directory holding the Llama-3-shaped tokenizer.json after `edit`, with its
// tokenizer_config.json.
std::string edited_llama3(const std::string& name,
                          const std::function<void(nlohmann::json&)>& edit) {
  const std::string dir = std::string(SHARDTRAIN_TEST_TMP) + "/tokenizer_json/" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  nlohmann::json j = read(kRef + "/llama3/tokenizer.json");
  edit(j);
  std::ofstream(dir + "/tokenizer.json") << j.dump();
  fs::copy_file(kRef + "/llama3/tokenizer_config.json", dir + "/tokenizer_config.json");
  return dir;
}

// The UsageError's message for loading path; "" when it loads.
std::string load_error(const std::string& path) {
  try {
    data::Tokenizer tok(path);
  } catch (const runtime::UsageError& e) {
    return e.what();
  }
  return "";
}

void expect_refused(const std::string& path, const std::string& field) {
  const std::string msg = load_error(path);
  EXPECT_NE(msg.find(path), std::string::npos) << "names no file: " << msg;
  EXPECT_NE(msg.find(field), std::string::npos) << "names no " << field << ": " << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "more than one line: " << msg;
}

}  // namespace

TEST(TokenizerJson, IdsAndDecodesMatchTransformers) {
  const auto j = cases();
  ASSERT_EQ(j["tokenizers"].size(),
            8u);  // llama3, qwen2, big, gpt2, fallback, unk, olmo2, phi4mini
  for (const auto& [name, ref] : j["tokenizers"].items()) {
    const std::string dir = ref["dir"];
    for (const std::string& path :
         {dir, dir + "/tokenizer.json"}) {  // a model directory, or the file itself
      const data::Tokenizer tok(path);
      EXPECT_TRUE(tok.is_json());
      EXPECT_EQ(tok.path(), dir + "/tokenizer.json");
      EXPECT_EQ(tok.vocab_size(), ref["vocab_size"].get<int32_t>()) << name;
      EXPECT_EQ(tok.bos_id(), ref["bos_id"].get<int32_t>()) << name;
      EXPECT_EQ(tok.eos_id(), ref["eos_id"].get<int32_t>()) << name;
      const int32_t pad = ref["pad_id"];
      EXPECT_EQ(tok.pad_id(), pad >= 0 ? pad : tok.eos_id()) << name;
      int checked = 0, past_uint16 = 0;
      const auto empty = tok.encode("", true, false);  // the post_processor's tokens alone
      const bool template_ends_with_eos = !empty.empty() && empty.back() == tok.eos_id();
      for (const auto& c : ref["cases"]) {
        const std::string text = c["text"];
        const auto ids = c["ids"].get<std::vector<int32_t>>();
        const auto with_special = c["ids_special"].get<std::vector<int32_t>>();
        EXPECT_EQ(tok.encode(text, false, false), ids)
            << name << ": '" << text.substr(0, 80) << "'";
        EXPECT_EQ(tok.encode(text, true, false), with_special)
            << name << ": '" << text.substr(0, 80) << "'";
        EXPECT_EQ(tok.decode(with_special), c["decoded"].get<std::string>())
            << name << ": '" << text.substr(0, 80) << "'";
        auto with_eos =
            with_special;  // EOS once: after the template's tokens, unless they end with it
        if (!template_ends_with_eos) with_eos.push_back(tok.eos_id());
        EXPECT_EQ(tok.encode(text, true, true), with_eos) << name;
        for (int32_t id : ids) past_uint16 += id >= 65536;
        ++checked;
      }
      EXPECT_GE(checked, 60);
      if (name == "big") {
        EXPECT_GT(past_uint16, 100);
      }
    }
  }
}

TEST(TokenizerJson, DecodesOfCutCharactersMatchTokenizers) {
  const auto j = cases();
  int runs = 0, replaced = 0;
  for (const auto& [name, ref] : j["tokenizers"].items()) {
    const data::Tokenizer tok(ref["dir"].get<std::string>());
    for (const auto& d : ref["decodes"]) {
      const std::string want = d["text"];
      EXPECT_EQ(tok.decode(d["ids"].get<std::vector<int32_t>>()), want)
          << name << " " << d["ids"].dump();
      ++runs;
      replaced += want.find("\xEF\xBF\xBD") != std::string::npos;  // U+FFFD for a cut character
    }
  }
  EXPECT_GE(runs, 300);
  EXPECT_GE(replaced, 5);
}

TEST(TokenizerJson, SpecialTokensFromTheConfigFiles) {
  const auto j = cases();
  const std::string qwen = j["tokenizers"]["qwen2"]["dir"];
  const data::Tokenizer q(qwen);  // bos_token null: no BOS, and add_bos adds nothing
  EXPECT_EQ(q.bos_id(), -1);
  EXPECT_EQ(q.encode("hi", true, false), q.encode("hi", false, false));
  // No config at all: EOS is needed (training appends it), so the file is refused naming what to
  // add.
  const std::string bare = std::string(SHARDTRAIN_TEST_TMP) + "/tokenizer_json/bare";
  fs::remove_all(bare);
  fs::create_directories(bare);
  fs::copy_file(qwen + "/tokenizer.json", bare + "/tokenizer.json");
  EXPECT_NE(load_error(bare).find("eos_token"), std::string::npos) << load_error(bare);
  // generation_config.json's ids serve when nothing else names them (a list: the first).
  std::ofstream(bare + "/generation_config.json")
      << R"({"bos_token_id": 5, "eos_token_id": [7, 8]})";
  const data::Tokenizer g(bare);
  EXPECT_EQ(g.bos_id(), 5);
  EXPECT_EQ(g.eos_id(), 7);
  EXPECT_EQ(g.stop_ids(),
            (std::vector<int32_t>{7, 8}));  // generate() stops at either, as transformers' does
  EXPECT_EQ(q.stop_ids(), std::vector<int32_t>{q.eos_id()});
  // A token the config names that the tokenizer lacks.
  std::ofstream(bare + "/tokenizer_config.json")
      << R"({"eos_token": {"content": "<|no such token|>"}})";
  const std::string msg = load_error(bare);
  EXPECT_NE(msg.find("tokenizer_config.json: eos_token \"<|no such token|>\""), std::string::npos)
      << msg;
}

TEST(TokenizerJson, SentencePieceHonoursTokenizerConfig) {
  const std::string dir = std::string(SHARDTRAIN_TEST_TMP) + "/tokenizer_json/spm_config";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(std::string(SHARDTRAIN_SOURCE_DIR) + "/data/demo/tokenizer.model",
                dir + "/tokenizer.model");
  const data::Tokenizer plain(dir);  // no config files: the model's own ids, BOS added
  EXPECT_FALSE(plain.is_json());
  EXPECT_EQ(plain.encode("7 1 8").front(), 1);
  std::ofstream(dir + "/tokenizer_config.json")
      << R"({"add_bos_token": false, "add_eos_token": true, "bos_token": {"content": "<s>"}, "eos_token": "</s>", "pad_token": "<unk>"})";
  const data::Tokenizer tok(dir);
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_EQ(tok.pad_id(), tok.unk_id());
  const auto ids = tok.encode("7 1 8");
  EXPECT_NE(ids.front(), 1);                        // add_bos_token false
  EXPECT_EQ(ids.back(), 2);                         // add_eos_token true
  EXPECT_EQ(tok.encode("7 1 8", true, true), ids);  // EOS once
  EXPECT_EQ(tok.encode("7 1 8", false, false).size() + 1, ids.size());
}

TEST(TokenizerJson, OtherModelTypesAreRefused) {
  expect_refused(kRef + "/unigram/tokenizer.json", "model.type");
  expect_refused(kRef + "/wordpiece/tokenizer.json", "model.type");
  EXPECT_NE(load_error(kRef + "/unigram").find("Unigram"), std::string::npos);
}

TEST(TokenizerJson, FieldsThatWouldChangeTheIdsAreRefused) {
  using J = nlohmann::json;
  const std::vector<std::tuple<std::string, std::function<void(J&)>, std::string>> refused = {
      {"dropout", [](J& j) { j["model"]["dropout"] = 0.1; }, "model.dropout"},
      {"prefix", [](J& j) { j["model"]["continuing_subword_prefix"] = "##"; },
       "model.continuing_subword_prefix"},
      {"suffix", [](J& j) { j["model"]["end_of_word_suffix"] = "</w>"; },
       "model.end_of_word_suffix"},
      {"unk", [](J& j) { j["model"]["unk_token"] = "<nope>"; }, "model.unk_token"},
      {"merge",
       [](J& j) {
         j["model"]["merges"][0] = J::array({"zzz", "yyy"});
       },
       "model.merges[0]"},
      {"normalizer",
       [](J& j) {
         j["normalizer"] = {{"type", "NFKC"}};
       },
       "normalizer.type"},
      {"pre",
       [](J& j) {
         j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "_"}};
       },
       "pre_tokenizer.type"},
      {"behavior", [](J& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways"; },
       "pre_tokenizer.pretokenizers[0].behavior"},
      {"regex",
       [](J& j) {
         j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "(unclosed"}};
       },
       "pre_tokenizer.pretokenizers[0].pattern"},
      {"post",
       [](J& j) {
         j["post_processor"] = {{"type", "RobertaProcessing"}};
       },
       "post_processor.type"},
      {"template",
       [](J& j) {
         j["post_processor"]["single"].push_back({{"Sequence", {{"id", "B"}, {"type_id", 1}}}});
       },
       "post_processor.single[2]"},
      {"decoder",
       [](J& j) {
         j["decoder"] = {{"type", "WordPiece"}};
       },
       "decoder.type"},
      {"truncation",
       [](J& j) {
         j["truncation"] = {{"max_length", 8}};
       },
       "truncation"},
      {"padding",
       [](J& j) {
         j["padding"] = {{"strategy", "BatchLongest"}};
       },
       "padding"},
  };
  for (const auto& [name, edit, field] : refused)
    expect_refused(edited_llama3(name, edit) + "/tokenizer.json", field);
  // Values that change nothing load: dropout 0, an empty prefix, the legacy "a b" merges.
  const std::string ok = edited_llama3("harmless", [](J& j) {
    j["model"]["dropout"] = 0.0;
    j["model"]["continuing_subword_prefix"] = "";
    for (auto& m : j["model"]["merges"])
      m = m[0].get<std::string>() + " " + m[1].get<std::string>();
  });
  const data::Tokenizer legacy(ok);
  for (const auto& c : cases()["tokenizers"]["llama3"]["cases"])
    EXPECT_EQ(legacy.encode(c["text"].get<std::string>()),
              c["ids_special"].get<std::vector<int32_t>>());
}

TEST(TokenizerJson, VocabularyLargerThanTheModelIsRefused) {
  const auto j = cases();
  for (const auto& [name, ref] : j["tokenizers"].items()) {
    const data::Tokenizer tok(ref["dir"].get<std::string>());
    const int32_t n = ref["vocab_size"];
    tok.require_fits(n);  // padded model vocabularies are fine
    tok.require_fits(n + 64);
    try {
      tok.require_fits(n - 1);  // the added tokens count: the model vocabulary alone would fit
      ADD_FAILURE() << name << " fits a model one id short";
    } catch (const runtime::UsageError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(tok.path()), std::string::npos) << msg;
      EXPECT_NE(msg.find("vocab_size is " + std::to_string(n - 1)), std::string::npos) << msg;
    }
  }
}

TEST(TokenizerJson, PathsAreResolvedToTheFileTheModelCameWith) {
  const std::string both = std::string(SHARDTRAIN_TEST_TMP) + "/tokenizer_json/both";
  fs::remove_all(both);
  fs::create_directories(both);
  fs::copy_file(kRef + "/llama3/tokenizer.json", both + "/tokenizer.json");
  fs::copy_file(kRef + "/llama3/tokenizer_config.json", both + "/tokenizer_config.json");
  fs::copy_file(std::string(SHARDTRAIN_SOURCE_DIR) + "/data/demo/tokenizer.model",
                both + "/tokenizer.model");
  EXPECT_FALSE(
      data::Tokenizer(both)
          .is_json());  // Llama-2's layout: the SentencePiece model its tokenizer.json came from
  EXPECT_TRUE(data::Tokenizer(both + "/tokenizer.json").is_json());  // a file as given
  fs::remove(both + "/tokenizer.model");
  EXPECT_TRUE(data::Tokenizer(both).is_json());  // Llama-3's and Qwen2's layout
  const std::string empty = std::string(SHARDTRAIN_TEST_TMP) + "/tokenizer_json/empty";
  fs::create_directories(empty);
  EXPECT_NE(load_error(empty).find(
                empty + " is a directory with neither tokenizer.json nor tokenizer.model"),
            std::string::npos);
  EXPECT_NE(load_error(empty + "/missing.json").find("does not exist"), std::string::npos);
  const std::string config = empty + "/config.json";
  std::ofstream(config) << R"({"model_type": "llama"})";
  EXPECT_NE(load_error(config).find("not a SentencePiece model or a Hugging Face tokenizer.json"),
            std::string::npos);
}
