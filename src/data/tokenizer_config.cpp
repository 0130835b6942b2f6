#include "shardtrain/data/tokenizer_config.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "shardtrain/runtime/error.h"

namespace fs = std::filesystem;

namespace shardtrain::data {

namespace {

// The file's JSON object; null when the file does not exist.
nlohmann::json read_object(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return nullptr;
  std::ifstream in(path);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    throw runtime::UsageError(
        path.string() +
        " is not a JSON object; fix or remove it (transformers cannot read it either)");
  return j;
}

void read_name(const nlohmann::json& j, const char* key, const std::string& file,
               SpecialTokenName* out) {
  const auto it = j.find(key);
  if (it == j.end()) return;
  SpecialTokenName n;
  n.file = file;
  if (it->is_null()) {
    n.state = SpecialTokenName::State::kNull;
  } else if (it->is_string()) {
    n.state = SpecialTokenName::State::kSet;
    n.content = it->get<std::string>();
  } else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    n.state = SpecialTokenName::State::kSet;
    n.content = (*it)["content"].get<std::string>();
  } else {
    throw runtime::UsageError(file + ": " + key + " is " + it->dump() +
                              ", not a string, {\"content\": ...} or null");
  }
  *out = n;
}

void read_names(const nlohmann::json& j, const std::string& file, TokenizerConfig* c) {
  read_name(j, "bos_token", file, &c->bos);
  read_name(j, "eos_token", file, &c->eos);
  read_name(j, "pad_token", file, &c->pad);
  read_name(j, "unk_token", file, &c->unk);
}

std::optional<bool> read_flag(const nlohmann::json& j, const char* key, const std::string& file,
                              const std::string& where = "") {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean())
    throw runtime::UsageError(file + ": " + where + key + " is " + it->dump() +
                              ", not true or false");
  return it->get<bool>();
}

// generation_config.json's bos_token_id / eos_token_id: an id, a list (the first), or null.
int32_t read_id(const nlohmann::json& j, const char* key, const std::string& file) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return -1;
  const nlohmann::json& v = it->is_array() && !it->empty() ? (*it)[0] : *it;
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
    throw runtime::UsageError(file + ": " + key + " is " + it->dump() +
                              ", not a token id or a list of them");
  return v.get<int32_t>();
}

}  // namespace

TokenizerConfig read_tokenizer_config(const std::string& dir) {
  TokenizerConfig c;
  const fs::path base(dir);
  const std::string config_file = (base / "tokenizer_config.json").string();
  const nlohmann::json config = read_object(config_file);
  bool has_decoder = false;
  if (config.is_object()) {
    c.has_config = true;
    read_names(config, config_file, &c);
    c.add_bos_token = read_flag(config, "add_bos_token", config_file);
    c.add_eos_token = read_flag(config, "add_eos_token", config_file);
    c.split_special_tokens = read_flag(config, "split_special_tokens", config_file).value_or(false);
    c.legacy = read_flag(config, "legacy", config_file);
    c.add_prefix_space = read_flag(config, "add_prefix_space", config_file);
    const auto dec = config.find("added_tokens_decoder");
    has_decoder = dec != config.end() && dec->is_object();
    if (has_decoder)
      for (const auto& [id, tok] : dec->items()) {
        if (!tok.is_object() || !tok.contains("content") || !tok["content"].is_string())
          throw runtime::UsageError(config_file + ": added_tokens_decoder." + id +
                                    " has no \"content\" string");
        try {
          AddedTokenEntry& e = c.added_tokens[std::stoi(id)];
          e.content = tok["content"].get<std::string>();
          const std::string at = "added_tokens_decoder." + id + ".";
          e.lstrip = read_flag(tok, "lstrip", config_file, at).value_or(false);
          e.rstrip = read_flag(tok, "rstrip", config_file, at).value_or(false);
          e.single_word = read_flag(tok, "single_word", config_file, at).value_or(false);
          e.special = read_flag(tok, "special", config_file, at).value_or(false);
          // tokenizers' AddedToken: normalized defaults to not special
          e.normalized = read_flag(tok, "normalized", config_file, at).value_or(!e.special);
        } catch (const std::exception&) {
          throw runtime::UsageError(config_file + ": added_tokens_decoder key '" + id +
                                    "' is not a token id");
        }
      }
  }
  const std::string map_file = (base / "special_tokens_map.json").string();
  if (!has_decoder) {  // transformers reads it only then, and its entries win
    const nlohmann::json map = read_object(map_file);
    if (map.is_object()) read_names(map, map_file, &c);
  }
  const std::string gen_file = (base / "generation_config.json").string();
  const nlohmann::json gen = read_object(gen_file);
  if (gen.is_object()) {
    c.generation_bos = read_id(gen, "bos_token_id", gen_file);
    c.generation_eos = read_id(gen, "eos_token_id", gen_file);
    // generate() stops at any of them (Llama-3-Instruct: <|end_of_text|> and <|eot_id|>).
    if (gen.contains("eos_token_id") && gen["eos_token_id"].is_array())
      for (const auto& id : gen["eos_token_id"]) {
        nlohmann::json one = {{"eos_token_id", id}};
        c.generation_eos_ids.push_back(read_id(one, "eos_token_id", gen_file));
      }
    else if (c.generation_eos >= 0)
      c.generation_eos_ids.push_back(c.generation_eos);
  }
  return c;
}

}  // namespace shardtrain::data
