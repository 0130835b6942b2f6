#include "shardtrain/model/params.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <map>
#include <optional>

#include "shardtrain/model/family.h"
#include "shardtrain/model/moe.h"
#include "shardtrain/model/projections.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::model {

int64_t ParamSpec::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::vector<UnitSpec> model_units(const ModelConfig& c) {
  std::vector<UnitSpec> u{{UnitKind::kEmbedding, -1}};
  for (int64_t i = 0; i < c.num_layers; ++i) u.push_back({UnitKind::kDecoderLayer, i});
  u.push_back({UnitKind::kHead, -1});
  return u;
}

std::vector<LayerNormSpec> layer_norms(const ModelConfig& c) {
  const Family& fam = family(c.model_type);
  const int64_t h = c.hidden_size;
  std::vector<LayerNormSpec> n;
  if (fam.qk_norm == QkNorm::kPerHead) {
    n.push_back({NormRole::kQ, names::kQNorm, c.head_dim()});
    n.push_back({NormRole::kK, names::kKNorm, c.head_dim()});
  } else if (fam.qk_norm == QkNorm::kWhole) {
    n.push_back({NormRole::kQ, names::kQNorm, c.num_heads * c.head_dim()});
    n.push_back({NormRole::kK, names::kKNorm, c.num_kv_heads * c.head_dim()});
  }
  switch (fam.norms) {
    case NormPlacement::kPre:
      n.push_back({NormRole::kAttnIn, names::kInputNorm, h});
      n.push_back({NormRole::kMlpIn, names::kPostNorm, h});
      break;
    case NormPlacement::kPost:
      n.push_back({NormRole::kAttnOut, names::kPostNorm, h});
      n.push_back({NormRole::kMlpOut, names::kPostFfnNorm, h});
      break;
    case NormPlacement::kSandwich:
      n.push_back({NormRole::kAttnIn, names::kInputNorm, h});
      n.push_back({NormRole::kAttnOut, names::kPostNorm, h});
      n.push_back({NormRole::kMlpIn, names::kPreFfnNorm, h});
      n.push_back({NormRole::kMlpOut, names::kPostFfnNorm, h});
      break;
  }
  return n;
}

std::vector<ParamSpec> llama_param_specs(const ModelConfig& c) {
  const int64_t h = c.hidden_size;
  const bool zero_norm = family(c.model_type).norm_weight == NormWeight::kUnitOffset;
  std::vector<ParamSpec> s;
  s.push_back({names::kEmbed, {c.vocab_size, h}, false, 0});
  for (int64_t i = 0; i < c.num_layers; ++i) {
    for (Proj p : layer_projections(c, i)) {
      const ProjShape shape = proj_shape(c, p);
      s.push_back({proj_weight_name(i, p), {shape.out, shape.in}, false, i + 1});
      if (has_bias(c, p))
        s.push_back({proj_bias_name(i, p), {shape.out}, false, i + 1, /*is_bias=*/true});
    }
    if (c.moe_layer(i)) {  // the router, then each expert's gate, up and down
      s.push_back({router_weight_name(c, i), {c.num_experts, h}, false, i + 1});
      for (int64_t e = 0; e < c.num_experts; ++e)
        for (const ExpertProj p : kExpertProjections) {
          s.push_back({expert_weight_name(c, i, e, p), expert_shape(c, p), false, i + 1});
          s.back().expert = e;
        }
    }
    for (const LayerNormSpec& n : layer_norms(c))
      s.push_back({names::layer(i, n.local), {n.size}, true, i + 1, false, zero_norm});
  }
  s.push_back({names::kNorm, {h}, true, c.num_layers + 1, false, zero_norm});
  if (!c.tie_word_embeddings)
    s.push_back({names::kLmHead, {c.vocab_size, h}, false, c.num_layers + 1});
  return s;
}

at::Tensor init_param(const ParamSpec& spec, uint64_t seed, double std) {
  if (spec.is_norm)
    return spec.zero_norm ? at::zeros(spec.shape, at::kFloat) : at::ones(spec.shape, at::kFloat);
  if (spec.is_bias)
    return at::zeros(spec.shape, at::kFloat);  // transformers' _init_weights zeroes Linear biases
  uint64_t hsh = 1469598103934665603ull;       // FNV-1a of the name, mixed with the seed
  for (unsigned char ch : spec.name) hsh = (hsh ^ ch) * 1099511628211ull;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(hsh ^ (seed * 0x9E3779B97F4A7C15ull));
  return at::normal(0.0, std, spec.shape, gen, at::TensorOptions().dtype(at::kFloat));
}

ParamStore ParamStore::initialize(const ModelConfig& cfg, uint64_t seed) {
  ParamStore p;
  p.specs_ = llama_param_specs(cfg);
  for (const auto& s : p.specs_) {
    p.index_[s.name] = p.tensors_.size();
    p.tensors_.push_back(init_param(s, seed, cfg.initializer_range).set_requires_grad(true));
  }
  return p;
}

void check_weights(const ModelConfig& cfg, const io::SafetensorsModel& weights) {
  auto dims = [](const std::vector<int64_t>& v) {
    std::string out;
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
    return "[" + out + "]";
  };
  // config.json's torch_dtype, when it names a float type, is what every tensor must be stored in.
  const std::map<std::string, io::StDType> float_dtypes = {{"float32", io::StDType::F32},
                                                           {"float", io::StDType::F32},
                                                           {"bfloat16", io::StDType::BF16},
                                                           {"float16", io::StDType::F16},
                                                           {"half", io::StDType::F16}};
  const auto it = float_dtypes.find(cfg.torch_dtype);
  const std::optional<io::StDType> declared =
      it == float_dtypes.end() ? std::nullopt : std::optional(it->second);
  const auto names = weights.names();
  const std::string origin = names.empty() ? "the weights" : weights.file_of(names.front()).path();
  const auto specs = llama_param_specs(cfg);
  for (const auto& n : names) {
    // A bias the config does not declare: the config is not these weights' (transformers would drop
    // it).
    const bool bias = n.size() > 5 && n.compare(n.size() - 5, 5, ".bias") == 0;
    if (bias &&
        std::none_of(specs.begin(), specs.end(), [&n](const ParamSpec& s) { return s.name == n; }))
      throw runtime::UsageError("--weights: " + weights.file_of(n).path() + " holds '" + n +
                                "', a bias that " + cfg.name +
                                " does not declare (attention_bias/mlp_bias/model_type); pass the "
                                "config.json that came with these weights");
  }
  for (const auto& s : specs) {
    if (std::find(names.begin(), names.end(), s.name) == names.end())
      throw runtime::UsageError("--weights: " + origin + " has no tensor '" + s.name +
                                "', which --model " + cfg.name +
                                " needs; pass the config.json that came with these weights");
    const auto& info = weights.info(s.name);
    const std::string where =
        "--weights: tensor '" + s.name + "' in " + weights.file_of(s.name).path();
    if (info.shape != s.shape)
      throw runtime::UsageError(
          where + " has shape " + dims(info.shape) + " but the model config (--model " + cfg.name +
          ") needs " + dims(s.shape) + "; pass the config.json that came with these weights");
    if (info.dtype != io::StDType::F32 && info.dtype != io::StDType::BF16 &&
        info.dtype != io::StDType::F16)
      throw runtime::UsageError(where + " has dtype " + io::st_dtype_name(info.dtype) +
                                "; shardtrain reads F32, BF16 or F16 weights: convert them (e.g. "
                                "with transformers, torch_dtype)");
    if (declared && info.dtype != *declared)
      throw runtime::UsageError(
          where + " has dtype " + io::st_dtype_name(info.dtype) + " but " + cfg.name +
          " says torch_dtype \"" + cfg.torch_dtype +
          "\"; pass the config.json that came with these weights, or correct its torch_dtype");
  }
}

ParamStore ParamStore::load(const ModelConfig& cfg, const io::SafetensorsModel& weights) {
  check_weights(cfg, weights);
  ParamStore p;
  p.specs_ = llama_param_specs(cfg);
  for (const auto& s : p.specs_) {
    p.index_[s.name] = p.tensors_.size();
    p.tensors_.push_back(weights.read(s.name).to(at::kFloat).set_requires_grad(true));
  }
  return p;
}

const at::Tensor& ParamStore::get(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) throw runtime::Error("no parameter named '" + name + "'");
  return tensors_[it->second];
}

io::NamedTensors ParamStore::named() const {
  io::NamedTensors out;
  for (size_t i = 0; i < specs_.size(); ++i) out.emplace_back(specs_[i].name, tensors_[i].detach());
  return out;
}

int64_t ParamStore::numel() const {
  int64_t n = 0;
  for (const auto& t : tensors_) n += t.numel();
  return n;
}

}  // namespace shardtrain::model
