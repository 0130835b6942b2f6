// Reading a tokenizer.json's objects: every refusal is one UsageError line naming the file and
// the field (model.type, pre_tokenizer.pretokenizers[1].behavior), which main turns into exit 2.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace shardtrain::data {

// Where in which file a value sits, for messages.
struct JsonSpot {
  std::string file, field;
  JsonSpot at(const std::string& key) const;  // field.key
  JsonSpot index(size_t i) const;             // field[i]
  std::string name() const;                   // "FILE: field"
};

// "FILE: field <why>" as a UsageError.
[[noreturn]] void refuse(const JsonSpot& spot, const std::string& why);
// A short rendering of a value for messages ("Unigram", 0.1, {...}).
std::string json_text(const nlohmann::json& v);

// obj[key], refusing when obj is no object or lacks key.
const nlohmann::json& json_member(const nlohmann::json& obj, const char* key, const JsonSpot& spot);
// obj[key] as a bool: `absent` when missing or null, refused when another type.
bool json_bool(const nlohmann::json& obj, const char* key, bool absent, const JsonSpot& spot);
// obj[key] as a string, refused when missing or another type.
std::string json_string(const nlohmann::json& obj, const char* key, const JsonSpot& spot);
// obj["type"], which names a component's kind.
std::string json_type(const nlohmann::json& obj, const JsonSpot& spot);

}  // namespace shardtrain::data
