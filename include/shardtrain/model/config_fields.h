// config.json's fields and what shardtrain does with each: read (it changes the model, and it is
// implemented as transformers implements it), harmless (it does not change training), or refused
// with the value that shardtrain cannot honour. docs/models.md lists the same table.
#pragma once
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace shardtrain::model {

enum class FieldUse {
  kRead,      // shapes and math shardtrain implements (vocab_size, rope_theta, ...)
  kHarmless,  // does not change training (transformers_version, use_cache, ...)
  kChecked,   // accepted only at the value shardtrain implements (attention_bias false, ...)
};

struct ConfigField {
  const char* name;
  FieldUse use;
  const char* what;        // one line for docs and messages
  bool after_init = true;  // false: it shapes only a fresh run (the seeded init, the stored dtype),
                           // not a resumed one
};

// Every config.json field shardtrain knows, in one table.
const std::vector<ConfigField>& config_fields();

// Throws UsageError naming the field and its value for a field set to what shardtrain does not
// implement (e.g. attention_bias true, hidden_act gelu); returns the fields it does not know,
// which the caller warns about.
std::vector<std::string> check_config_fields(const nlohmann::json& j, const std::string& origin);

// The fields whose values differ between two configs (model_to_hf_json's) and that change what a
// resumed run computes, each as "name saved -> now"; harmless fields and those that only shape a
// fresh run are left out.
std::vector<std::string> changed_fields(const nlohmann::json& saved, const nlohmann::json& now);

}  // namespace shardtrain::model
