// The parameter count walks the projections' shapes, so it is defined here beside them rather
// than in config.cpp, which projections.h itself depends on.
#include "shardtrain/model/config.h"
#include "shardtrain/model/params.h"
#include "shardtrain/model/projections.h"

namespace shardtrain::model {
namespace {

// Every parameter once, in T (double first: sizes past int64 are caught before they wrap).
// experts: of a sparse layer's, how many count (all of them, or the experts_per_token a token
// passes through).
template <class T>
T count_params(const ModelConfig& c, bool all_experts = true) {
  T norms = 0;
  for (const LayerNormSpec& n : layer_norms(c)) norms += static_cast<T>(n.size);
  T layers = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    T layer = norms;
    for (Proj p : layer_projections(c, l)) {
      const ProjShape s = proj_shape(c, p);
      layer += static_cast<T>(s.out) * static_cast<T>(s.in) +
               (has_bias(c, p) ? static_cast<T>(s.out) : T{0});
    }
    if (c.moe_layer(l)) {  // the router and the experts' gate, up and down
      const T expert =
          3 * static_cast<T>(c.hidden_size) * static_cast<T>(c.expert_intermediate_size);
      layer += static_cast<T>(c.num_experts) * static_cast<T>(c.hidden_size) +
               static_cast<T>(all_experts ? c.num_experts : c.experts_per_token) * expert;
    }
    layers += layer;
  }
  const T embed = static_cast<T>(c.vocab_size) * static_cast<T>(c.hidden_size);
  return layers + embed * (c.tie_word_embeddings ? 1 : 2) + static_cast<T>(c.hidden_size);
}

}  // namespace

double param_count(const ModelConfig& cfg) { return count_params<double>(cfg); }

int64_t ModelConfig::num_params() const { return count_params<int64_t>(*this); }

int64_t ModelConfig::num_active_matmul_params() const {
  return count_params<int64_t>(*this, /*all_experts=*/false) - num_embedding_params() +
         (tie_word_embeddings ? num_embedding_params() : 0);
}

}  // namespace shardtrain::model
