#include "shardtrain/model/lora.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "shardtrain/runtime/error.h"

namespace shardtrain::model {

bool LoraConfig::targets_proj(Proj p) const {
  for (const auto& t : targets)
    if (t == proj_name(p)) return true;
  return false;
}

void LoraConfig::validate() const {
  // Checked even with LoRA off, so a typo in a config file is never silently ignored.
  if (rank < 0)
    throw runtime::UsageError("--lora-rank must be >= 0 (0: LoRA off), got " +
                              std::to_string(rank));
  if (!(alpha > 0)) {
    std::ostringstream os;
    os << "--lora-alpha must be positive, got " << alpha;
    throw runtime::UsageError(os.str());
  }
  if (!(dropout >= 0 && dropout < 1)) {
    std::ostringstream os;
    os << "--lora-dropout must be in [0, 1), got " << dropout;
    throw runtime::UsageError(os.str());
  }
  if (targets.empty())
    throw runtime::UsageError("--lora-targets must name at least one projection");
  for (const auto& t : targets)
    if (!proj_by_name(t))
      throw runtime::UsageError("--lora-targets: unknown target '" + t + "'; choose from " +
                                proj_names_csv());
}

std::vector<std::string> parse_lora_targets(const std::string& csv) {
  std::vector<std::string> out;
  std::stringstream ss(csv);
  for (std::string t; std::getline(ss, t, ',');) {
    if (!proj_by_name(t))
      throw runtime::UsageError("--lora-targets: unknown target '" + t + "'; choose from " +
                                proj_names_csv());
    for (const auto& seen : out)
      if (seen == t) throw runtime::UsageError("--lora-targets: '" + t + "' is named twice");
    out.push_back(t);
  }
  if (out.empty()) throw runtime::UsageError("--lora-targets must name at least one projection");
  return out;
}

std::string join_lora_targets(const std::vector<std::string>& targets) {
  std::string s;
  for (const auto& t : targets) s += (s.empty() ? "" : ",") + t;
  return s;
}

std::string lora_name(int64_t layer, Proj p, char ab) {
  return names::layer(layer, proj_module(p)) + ".lora_" + ab + ".weight";
}

std::string peft_key(const std::string& name) { return "base_model.model." + name; }

std::vector<ParamSpec> lora_param_specs(const ModelConfig& c, const LoraConfig& lora) {
  const int64_t r = lora.rank;
  std::vector<ParamSpec> s;
  if (!lora.enabled()) return s;
  // A target the model's layers lack (q_proj of Phi-3's merged qkv_proj) would train nothing.
  const std::vector<Proj>& layer = layer_projections(c);
  std::string have;
  for (Proj p : layer) have += (have.empty() ? "" : ",") + std::string(proj_name(p));
  for (const auto& t : lora.targets)
    if (std::none_of(layer.begin(), layer.end(), [&](Proj p) { return t == proj_name(p); }))
      throw runtime::UsageError("--lora-targets: " + c.model_type + " layers have no " + t +
                                " (theirs: " + have + "); pass --lora-targets with those names");
  for (int64_t i = 0; i < c.num_layers; ++i) {
    for (const auto& t : lora.targets)  // an expert is no nn.Linear in transformers 5: PEFT
      if (c.moe_layer(i) && (t == "gate_proj" || t == "up_proj" || t == "down_proj"))
        throw runtime::UsageError("--lora-targets: " + t + " is the MLP of a dense layer; " +
                                  c.model_type +
                                  "'s sparse layers hold experts instead, which "
                                  "LoRA does not target here; pass q_proj,k_proj,v_proj,o_proj");
    for (Proj p : layer_projections(c, i)) {
      if (!lora.targets_proj(p)) continue;
      const ProjShape shape = proj_shape(c, p);
      s.push_back({lora_name(i, p, 'A'), {r, shape.in}, false, i + 1});
      s.push_back({lora_name(i, p, 'B'), {shape.out, r}, false, i + 1});
    }
  }
  return s;
}

at::Tensor init_lora_param(const ParamSpec& spec, uint64_t seed) {
  const bool is_a = spec.name.find(".lora_A.") != std::string::npos;
  if (!is_a) return at::zeros(spec.shape, at::kFloat);
  uint64_t hsh = 1469598103934665603ull;  // FNV-1a of the name, mixed with the seed (as init_param)
  for (unsigned char ch : spec.name) hsh = (hsh ^ ch) * 1099511628211ull;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(hsh ^ (seed * 0x9E3779B97F4A7C15ull));
  const double bound = 1.0 / std::sqrt(static_cast<double>(spec.shape[1]));
  return at::empty(spec.shape, at::kFloat).uniform_(-bound, bound, gen);
}

namespace {
at::Generator dropout_generator(const at::Device& device, uint64_t seed) {
  if (device.is_cpu()) return at::make_generator<at::CPUGeneratorImpl>(seed);
  // A fresh generator of the tensor's device (CUDA: Philox), never its default one, which other
  // code draws from.
  at::Generator gen = at::globalContext()
                          .getAcceleratorHooksInterface(device.type())
                          .getNewGenerator(device.index());
  gen.set_current_seed(seed);
  return gen;
}
}  // namespace

at::Tensor lora_dropout(const at::Tensor& x, double p, uint64_t seed) {
  if (p <= 0) return x;
  return lora_dropout_rows(x.unsqueeze(0), p, {seed}).squeeze(0);  // one row: the whole tensor
}

at::Tensor lora_dropout_rows(const at::Tensor& x, double p, const std::vector<uint64_t>& row_seeds,
                             const DropoutTokens& tokens) {
  if (p <= 0 || x.numel() == 0) return x;
  const int64_t rows = static_cast<int64_t>(row_seeds.size());
  if (rows == 0 || x.size(0) != rows)
    throw runtime::Error("LoRA dropout: " + std::to_string(rows) + " row seeds for an input of " +
                         std::to_string(x.size(0)) + " rows");
  // Drawn where x lives: no host mask and no copy per projection. [B, elements per row]
  const bool share = tokens.index.defined();
  const int64_t per_row =
      share ? x.numel() / rows / x.size(1) * tokens.row_tokens : x.numel() / rows;
  auto keep = at::empty({rows, per_row}, x.options().dtype(at::kFloat));
  for (int64_t r = 0; r < rows; ++r) {
    at::Generator gen = dropout_generator(x.device(), row_seeds[r]);
    keep[r].bernoulli_(1.0 - p, gen);
  }
  if (share)  // the whole rows' masks, at the share's places
    keep = keep.view({rows, tokens.row_tokens, -1}).index_select(1, tokens.index);
  return x * (keep.reshape(x.sizes()) / (1.0 - p)).to(x.scalar_type());
}

namespace {
uint64_t splitmix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
}  // namespace

std::vector<uint64_t> dropout_row_seeds(uint64_t seed, int64_t epoch,
                                        const std::vector<int64_t>& sample_ids) {
  std::vector<uint64_t> out;
  out.reserve(sample_ids.size());
  const uint64_t base = splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(epoch));
  for (int64_t id : sample_ids) out.push_back(splitmix64(base ^ static_cast<uint64_t>(id)));
  return out;
}

std::vector<uint64_t> module_seeds(const std::vector<uint64_t>& row_seeds, int64_t layer,
                                   int projection) {
  std::vector<uint64_t> out;
  out.reserve(row_seeds.size());
  for (uint64_t s : row_seeds)
    out.push_back((s * 1000003ull + static_cast<uint64_t>(layer)) * 16 +
                  static_cast<uint64_t>(projection));
  return out;
}

at::Tensor lora_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& a,
                       const at::Tensor& b, double scale, const at::Tensor& xd,
                       const at::Tensor& bias) {
  return at::linear(x, w, bias) + at::linear(at::linear(xd, a), b) * scale;
}

at::Tensor lora_linear(const at::Tensor& x, const at::Tensor& w, const LoraAdapter& adapter,
                       const at::Tensor& bias) {
  return at::linear(x, w, bias) + lora_update(x, adapter);
}

at::Tensor lora_update(const at::Tensor& x, const LoraAdapter& adapter) {
  const at::Tensor xd = lora_dropout_rows(x, adapter.dropout, adapter.row_seeds, adapter.tokens);
  return at::linear(at::linear(xd, adapter.a), adapter.b) * adapter.scale;
}

at::Tensor merge_lora(const at::Tensor& w, const at::Tensor& a, const at::Tensor& b, double scale) {
  return (w.to(at::kFloat) + at::matmul(b.to(at::kFloat), a.to(at::kFloat)) * scale)
      .to(w.scalar_type());
}

}  // namespace shardtrain::model
