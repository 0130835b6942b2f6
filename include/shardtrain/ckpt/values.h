// The small values of a checkpoint (step counters, the data loader's position, configurations):
// named integers, reals and strings (JSON as its text), stored as root attributes of the file.
// A save fills one Values from every state; a load hands each state the file's, whose
// getters throw Error naming the file, the attribute and the state that asked for it.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace shardtrain::ckpt {

class Values {
 public:
  using Value = std::variant<int64_t, double, std::string>;

  // Named setters, not overloads: a literal 0 must not silently become a real or a string.
  void set_int(const std::string& key, int64_t v);
  void set_real(const std::string& key, double v);
  void set_text(const std::string& key, std::string v);
  void set_json(const std::string& key, const nlohmann::json& v);  // stored as its dump()

  bool has(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  double get_real(const std::string& key) const;  // an integer reads as a real
  std::string get_text(const std::string& key) const;
  nlohmann::json get_json(const std::string& key) const;

  // In save order; a reader lists every attribute of the file.
  const std::vector<std::pair<std::string, Value>>& entries() const { return entries_; }
  // Adds every entry of `other`; throws Error naming a key both hold.
  void merge(const Values& other, const std::string& state);
  // A reader's record of an attribute it could not read: the getters throw `why` for that key.
  void set_unreadable(const std::string& key, const std::string& why);
  // The same values, with errors naming `origin` (the file) and `state` (the state asking).
  Values about(const std::string& origin, const std::string& state) const;
  const std::string& origin() const { return origin_; }  // the file, for a state's own messages

 private:
  const Value& find(const std::string& key) const;
  [[noreturn]] void wrong_type(const std::string& key, const char* want) const;
  std::vector<std::pair<std::string, Value>> entries_;
  std::map<std::string, std::string> unreadable_;
  std::string origin_ = "checkpoint";
  std::string state_;
};

}  // namespace shardtrain::ckpt
