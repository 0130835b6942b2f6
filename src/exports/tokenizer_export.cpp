// The tokenizer files every export carries, so that AutoTokenizer.from_pretrained(export) and
// pipeline("text-generation", model=export) work on what train and convert write.
#include "shardtrain/exports/tokenizer_export.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "shardtrain/data/token_file.h"
#include "shardtrain/data/tokenizer.h"
#include "shardtrain/runtime/agreement.h"
#include "shardtrain/runtime/atomic_write.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/logging.h"
#include "shardtrain/runtime/sha256.h"

namespace fs = std::filesystem;

namespace shardtrain::exports {
namespace {

// What transformers reads of a tokenizer from a model directory (the chat template included).
const char* const kTokenizerFiles[] = {
    "tokenizer.model",   "tokenizer.json",      "tokenizer_config.json", "special_tokens_map.json",
    "added_tokens.json", "chat_template.jinja", "chat_template.json"};

// What a --tokenizer file brings along from its directory (the tokenizer file itself aside).
const char* const kCompanionFiles[] = {"tokenizer_config.json", "special_tokens_map.json",
                                       "added_tokens.json", "chat_template.jinja",
                                       "chat_template.json"};

// The tokenizer an export carries, resolved once for the check and the writing.
struct Resolved {
  fs::path
      copy_from;  // --weights' directory, whose tokenizer files are copied unchanged; empty: none
  std::vector<std::string> weights_files;  // its tokenizer.model / tokenizer.json, whose sha256 the
                                           // token file may record
  std::string file;   // --tokenizer's tokenizer file (a .model or a tokenizer.json); "" when none
                      // (or none known)
  bool json = false;  // file is a tokenizer.json
  fs::path companions_from;   // file's directory, when it holds a tokenizer_config.json to copy
                              // along; empty: none
  bool write_config = false;  // file is a SentencePiece model without a tokenizer_config.json:
                              // Llama-2's is written for it
  std::string named;          // how messages name it
};

Resolved resolve(const TokenizerSource& src) {
  std::error_code ec;  // the non-throwing forms: a missing or odd path is no tokenizer source
  fs::path dir = src.weights;
  if (!fs::is_directory(dir, ec)) dir = dir.parent_path();
  Resolved r;
  for (const char* name : {"tokenizer.model", "tokenizer.json"})
    if (!src.weights.empty() && fs::is_regular_file(dir / name, ec))
      r.weights_files.push_back((dir / name).string());
  if (!r.weights_files.empty()) {
    r.copy_from = dir;
    r.named =
        "--weights " + dir.string() + "'s " + fs::path(r.weights_files.front()).filename().string();
    return r;
  }
  if (src.tokenizer.empty()) return r;
  r.file = data::resolve_tokenizer_file(src.tokenizer);
  r.json = data::is_tokenizer_json(r.file);
  const fs::path home = fs::path(r.file).parent_path();
  r.write_config = !r.json && !fs::exists(home / "tokenizer_config.json", ec);
  if (!r.write_config) r.companions_from = home.empty() ? fs::path(".") : home;
  r.named = "--tokenizer " + src.tokenizer;
  return r;
}

// The tokenizer_sha256 a token file records; "" when there is none to read (a damaged --data is
// reported by the run that reads it, and a checkpoint's recorded one may be gone).
std::string recorded_tokenizer_sha256(const std::string& data) {
  std::error_code ec;
  if (data.empty() || !fs::is_regular_file(data, ec)) return "";
  try {
    return data::TokenFile(data).meta().tokenizer_sha256;
  } catch (const runtime::Error&) {
    return "";
  }
}

// Copies one file unchanged; the same file (an export into its own --weights directory) is left
// alone.
void copy_unchanged(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  if (fs::exists(to, ec) && fs::equivalent(from, to, ec)) return;
  runtime::write_atomically(
      to.string(), [&](const std::string& tmp) {  // whole or absent, like every export file
        fs::copy_file(from, tmp, fs::copy_options::overwrite_existing);
      });
}

void write_json(const fs::path& path, const nlohmann::json& j) {
  runtime::write_file_atomically(path.string(), j.dump(2) + "\n");
}

// tokenizer_config.json and special_tokens_map.json as Llama-2's on the Hub, which transformers'
// LlamaTokenizer (the fast one, converted from tokenizer.model) reads.
void write_llama_tokenizer_config(const fs::path& dir, const std::string& spm,
                                  const model::ModelConfig& model) {
  const data::Tokenizer tok(spm);
  const auto cfg = model::model_to_hf_json(model);
  const bool has_pad = cfg.contains("pad_token_id") && cfg["pad_token_id"].is_number_integer();
  const int32_t pad_id = has_pad ? cfg["pad_token_id"].get<int32_t>() : -1;
  nlohmann::json config = {{"tokenizer_class", "LlamaTokenizer"},
                           {"add_bos_token", true},
                           {"add_eos_token", false},
                           {"clean_up_tokenization_spaces", false},
                           {"legacy", false},
                           {"model_max_length", model.max_position_embeddings},
                           {"pad_token", nullptr},
                           {"added_tokens_decoder", nlohmann::json::object()}};
  nlohmann::json special = nlohmann::json::object();
  const std::pair<const char*, int32_t> tokens[] = {{"unk_token", tok.unk_id()},
                                                    {"bos_token", tok.bos_id()},
                                                    {"eos_token", tok.eos_id()},
                                                    {"pad_token", pad_id}};
  for (const auto& [key, id] : tokens) {
    if (id < 0 || id >= tok.vocab_size()) continue;  // none: Llama-2 has no pad token
    nlohmann::json added = {{"content", tok.piece(id)},
                            {"lstrip", false},
                            {"normalized", false},
                            {"rstrip", false},
                            {"single_word", false}};
    special[key] = added;
    config[key] = tok.piece(id);
    added["special"] = true;
    config["added_tokens_decoder"][std::to_string(id)] = added;
  }
  write_json(dir / "tokenizer_config.json", config);
  write_json(dir / "special_tokens_map.json", special);
}

// transformers' GenerationConfig with the model config's special ids, so generate() stops at EOS.
void write_generation_config(const fs::path& dir, const model::ModelConfig& model) {
  const auto cfg = model::model_to_hf_json(model);
  nlohmann::json gen = nlohmann::json::object();
  for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id"})
    if (cfg.contains(key)) gen[key] = cfg[key];
  write_json(dir / "generation_config.json", gen);
}

}  // namespace

void check_export_tokenizer(const TokenizerSource& src, const model::ModelConfig& model) {
  const Resolved r = resolve(src);
  std::vector<std::string> shas;
  if (!r.file.empty()) {  // a --tokenizer: one whose ids the embedding can look up
    const data::Tokenizer tok(r.file);
    tok.require_fits(model.vocab_size);
    shas.push_back(tok.sha256());
  }
  for (const auto& f : r.weights_files) shas.push_back(runtime::sha256_file(f));
  const std::string want = recorded_tokenizer_sha256(src.data);
  if (shas.empty() || want.empty() || std::find(shas.begin(), shas.end(), want) != shas.end())
    return;
  throw runtime::UsageError(
      r.named + " (sha256 " + shas.front() + ") is not the tokenizer the token file " + src.data +
      " was prepared with (tokenizer_sha256 " + want + "); " +
      (r.copy_from.empty() ? "pass the tokenizer that prepare used"
                           : "prepare the data with the model's own tokenizer"));
}

void check_prompt_tokenizer(const std::string& weights, const std::string& tokenizer) {
  if (weights.empty() || tokenizer.empty()) return;
  const Resolved r = resolve({weights, "", ""});
  if (r.weights_files.empty()) return;
  const std::string file = data::resolve_tokenizer_file(tokenizer);
  const std::string sha = runtime::sha256_file(file);
  for (const auto& f : r.weights_files)
    if (runtime::sha256_file(f) == sha) return;
  throw runtime::UsageError("--tokenizer " + tokenizer + " (sha256 " + sha + ") is not " + r.named +
                            " (sha256 " + runtime::sha256_file(r.weights_files.front()) +
                            "), so the prompts would be other ids than "
                            "the model was trained on; pass --tokenizer " +
                            r.copy_from.string());
}

void write_tokenizer_files(const std::string& dir, const TokenizerSource& src,
                           const model::ModelConfig& model, bool full_model) {
  check_export_tokenizer(src, model);
  const Resolved r = resolve(src);
  const fs::path out(dir);
  std::error_code ec;
  std::set<std::string> written;
  for (const char* name : kTokenizerFiles) {
    if (r.copy_from.empty() || !fs::is_regular_file(r.copy_from / name, ec)) continue;
    copy_unchanged(r.copy_from / name, out / name);
    written.insert(name);
  }
  if (!r.file.empty()) {  // under the name AutoTokenizer looks for, whatever the file was called
    const char* name = r.json ? "tokenizer.json" : "tokenizer.model";
    copy_unchanged(r.file, out / name);
    written.insert(name);
  }
  for (const char* name : kCompanionFiles) {
    if (r.companions_from.empty() || !fs::is_regular_file(r.companions_from / name, ec)) continue;
    copy_unchanged(r.companions_from / name, out / name);
    written.insert(name);
  }
  if (r.write_config) {
    write_llama_tokenizer_config(out, r.file, model);
    written.insert({"tokenizer_config.json", "special_tokens_map.json"});
  }
  // An earlier export's files left in dir would be loaded with these (tokenizer.json before
  // tokenizer.model).
  for (const char* name : kTokenizerFiles)
    if (!written.count(name)) fs::remove(out / name);
  if (written.empty())
    runtime::log::warn("the export in " + dir +
                       " has no tokenizer files, so AutoTokenizer.from_pretrained cannot load it; "
                       "pass --tokenizer with the tokenizer the data was prepared with");
  if (!full_model) return;
  // A --weights directory's generation defaults (a Hub model's sampling settings) stay with the
  // model.
  if (!r.copy_from.empty() && fs::is_regular_file(r.copy_from / "generation_config.json", ec))
    copy_unchanged(r.copy_from / "generation_config.json", out / "generation_config.json");
  else
    write_generation_config(out, model);
}

void check_tokenizers(const TokenizerSource& src, const std::vector<std::string>& data,
                      const std::string& prompt_tokenizer, const model::ModelConfig& model,
                      const runtime::MpiEnv& env) {
  std::string failure;
  if (env.rank() == 0) {  // one reader of the files; the verdict is shared
    try {
      for (const std::string& file : data)
        if (!file.empty()) check_export_tokenizer({src.weights, src.tokenizer, file}, model);
      check_prompt_tokenizer(src.weights, prompt_tokenizer);
    } catch (const runtime::UsageError& e) {
      failure = e.what();
    }
  }
  if (const std::string agreed = runtime::agreed_failure(failure); !agreed.empty())
    throw runtime::AgreedUsageError(agreed);
}

}  // namespace shardtrain::exports
