// The parameter count walks the projections' shapes, so it is defined here beside them rather
// than in config.cpp, which projections.h itself depends on.
#include "shardtrain/model/config.h"
#include "shardtrain/model/params.h"
#include "shardtrain/model/projections.h"

namespace shardtrain::model {
namespace {

// Every parameter once, in T (double first: sizes past int64 are caught before they wrap).
template <class T>
T count_params(const ModelConfig& c) {
  T layer = 0;
  for (const LayerNormSpec& n : layer_norms(c)) layer += static_cast<T>(n.size);
  for (Proj p : layer_projections(c)) {
    const ProjShape s = proj_shape(c, p);
    layer += static_cast<T>(s.out) * static_cast<T>(s.in) +
             (has_bias(c, p) ? static_cast<T>(s.out) : T{0});
  }
  const T embed = static_cast<T>(c.vocab_size) * static_cast<T>(c.hidden_size);
  return static_cast<T>(c.num_layers) * layer + embed * (c.tie_word_embeddings ? 1 : 2) +
         static_cast<T>(c.hidden_size);
}

}  // namespace

double param_count(const ModelConfig& cfg) { return count_params<double>(cfg); }

int64_t ModelConfig::num_params() const { return count_params<int64_t>(*this); }

}  // namespace shardtrain::model
