#include "shardtrain/data/tokenizer_json_fields.h"

#include "shardtrain/runtime/error.h"

namespace shardtrain::data {

JsonSpot JsonSpot::at(const std::string& key) const {
  return {file, field.empty() ? key : field + "." + key};
}

JsonSpot JsonSpot::index(size_t i) const { return {file, field + "[" + std::to_string(i) + "]"}; }

std::string JsonSpot::name() const { return file + ": " + field; }

void refuse(const JsonSpot& spot, const std::string& why) {
  throw runtime::UsageError(spot.name() + " " + why);
}

std::string json_text(const nlohmann::json& v) {
  std::string s = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  constexpr size_t kMax = 80;  // a whole vocabulary would make a long line
  if (s.size() > kMax) s = s.substr(0, kMax) + "...";
  return s;
}

const nlohmann::json& json_member(const nlohmann::json& obj, const char* key,
                                  const JsonSpot& spot) {
  if (!obj.is_object()) refuse(spot, "is " + json_text(obj) + ", not a JSON object");
  const auto it = obj.find(key);
  if (it == obj.end()) refuse(spot.at(key), "is missing");
  return *it;
}

bool json_bool(const nlohmann::json& obj, const char* key, bool absent, const JsonSpot& spot) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return absent;
  if (!it->is_boolean()) refuse(spot.at(key), "is " + json_text(*it) + ", not true or false");
  return it->get<bool>();
}

std::string json_string(const nlohmann::json& obj, const char* key, const JsonSpot& spot) {
  const auto& v = json_member(obj, key, spot);
  if (!v.is_string()) refuse(spot.at(key), "is " + json_text(v) + ", not a string");
  return v.get<std::string>();
}

std::string json_type(const nlohmann::json& obj, const JsonSpot& spot) {
  return json_string(obj, "type", spot);
}

}  // namespace shardtrain::data
