#include "shardtrain/model/param_names.h"

#include "shardtrain/model/config.h"

namespace shardtrain::model {

std::string names::layer(int64_t i, const char* local) {
  return "model.layers." + std::to_string(i) + "." + local;
}
const char* names::lm_head(const ModelConfig& c) {
  return c.tie_word_embeddings ? names::kEmbed : names::kLmHead;
}

}  // namespace shardtrain::model
