#include "shardtrain/model/flops.h"

namespace shardtrain::model {

double flops_per_token(const ModelConfig& c, int64_t seq_len) {
  // A sparse layer's token passes through its experts_per_token experts only.
  const double n = static_cast<double>(c.num_active_matmul_params());
  return 6.0 * n + 12.0 * c.num_layers * c.num_heads * c.head_dim() * static_cast<double>(seq_len);
}

}  // namespace shardtrain::model
