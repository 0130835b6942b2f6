#include "shardtrain/ckpt/values.h"

#include <algorithm>

#include "shardtrain/runtime/error.h"

namespace shardtrain::ckpt {
namespace {

// "attribute step" or, when a state asked, "attribute step of state \"train_step\"".
std::string describe(const std::string& key, const std::string& state) {
  return "attribute " + key + (state.empty() ? "" : " of state \"" + state + "\"");
}

}  // namespace

void Values::set_int(const std::string& key, int64_t v) { entries_.emplace_back(key, v); }

void Values::set_real(const std::string& key, double v) { entries_.emplace_back(key, v); }

void Values::set_text(const std::string& key, std::string v) {
  entries_.emplace_back(key, std::move(v));
}

void Values::set_json(const std::string& key, const nlohmann::json& v) {
  entries_.emplace_back(key, v.dump());
}

bool Values::has(const std::string& key) const {
  if (unreadable_.count(key)) return true;
  return std::any_of(entries_.begin(), entries_.end(),
                     [&](const auto& e) { return e.first == key; });
}

const Values::Value& Values::find(const std::string& key) const {
  // A damaged file is the user's to replace (exit 2), like a truncated one.
  if (auto bad = unreadable_.find(key); bad != unreadable_.end())
    throw runtime::UsageError(bad->second);
  for (const auto& e : entries_)
    if (e.first == key) return e.second;
  throw runtime::UsageError(origin_ + ": " + describe(key, state_) +
                            " is missing; the checkpoint is damaged or was saved without it");
}

void Values::wrong_type(const std::string& key, const char* want) const {
  throw runtime::UsageError(origin_ + ": " + describe(key, state_) + " is not " + want +
                            "; the checkpoint is damaged");
}

int64_t Values::get_int(const std::string& key) const {
  const Value& v = find(key);
  if (const auto* i = std::get_if<int64_t>(&v)) return *i;
  wrong_type(key, "an integer");
}

double Values::get_real(const std::string& key) const {
  const Value& v = find(key);
  if (const auto* d = std::get_if<double>(&v)) return *d;
  if (const auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  wrong_type(key, "a number");
}

std::string Values::get_text(const std::string& key) const {
  const Value& v = find(key);
  if (const auto* s = std::get_if<std::string>(&v)) return *s;
  wrong_type(key, "a string");
}

nlohmann::json Values::get_json(const std::string& key) const {
  const std::string text = get_text(key);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw runtime::UsageError(origin_ + ": attribute " + key + " is not valid JSON (" + e.what() +
                              "); the checkpoint is damaged");
  }
}

void Values::merge(const Values& other, const std::string& state) {
  for (const auto& e : other.entries_) {
    if (has(e.first))
      throw runtime::Error("checkpoint state \"" + state + "\" saves attribute " + e.first +
                           ", which another state saves already");
    entries_.push_back(e);
  }
}

void Values::set_unreadable(const std::string& key, const std::string& why) {
  unreadable_[key] = why;
}

Values Values::about(const std::string& origin, const std::string& state) const {
  Values v = *this;
  v.origin_ = origin;
  v.state_ = state;
  return v;
}

}  // namespace shardtrain::ckpt
