#include "shardtrain/model/decoder.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "shardtrain/model/llama.h"
#include "shardtrain/model/params.h"
#include "shardtrain/model/token_layout.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::model {

namespace {
std::map<std::string, at::Tensor> cast(const std::map<std::string, at::Tensor>& in,
                                       const at::Device& device, at::ScalarType dtype) {
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, t] : in) out[name] = t.to(device, dtype);
  return out;
}
}  // namespace

Decoder::Decoder(const ModelConfig& cfg, const std::map<std::string, at::Tensor>& weights,
                 const std::map<std::string, at::Tensor>& adapters, const LoraConfig& lora,
                 const at::Device& device, at::ScalarType dtype)
    : cfg_(cfg),
      weights_(cast(weights, device, dtype)),
      adapters_(cast(adapters, device, dtype)),
      lora_(lora),
      device_(device),
      dtype_(dtype),
      rope_(cfg, cfg.max_position_embeddings) {
  rope_.to(device_, dtype_);
}

KvCache Decoder::cache(int64_t rows, int64_t max_len) const {
  return KvCache(cfg_, rows, max_len, at::TensorOptions().dtype(dtype_).device(device_));
}

at::Tensor Decoder::step(const at::Tensor& tokens, const at::Tensor& positions,
                         KvCache& cache) const {
  c10::NoGradGuard no_grad;
  const auto lookup = [this](const std::string& name) -> at::Tensor {
    const auto it = weights_.find(name);
    if (it == weights_.end()) throw runtime::Error("decoder: no weight " + name);
    return it->second;
  };
  const auto adapter = [this](const std::string& name) -> at::Tensor {
    const auto it = adapters_.find(name);
    if (it == adapters_.end()) throw runtime::Error("decoder: no adapter " + name);
    return it->second;
  };
  const LoraRun run{&lora_, adapter, {}, /*train=*/false, {}};
  cache.begin_step(positions);
  const TokenLayout layout = cache_token_layout(rope_, positions, cache, device_);
  at::Tensor x = tokens.to(device_);
  for (const UnitSpec& u : model_units(cfg_))
    x = unit_forward(cfg_, u, lookup, x, layout, dtype_, lora_.enabled() ? &run : nullptr);
  cache.end_step();
  return x.to(at::kCPU, at::kFloat);
}

}  // namespace shardtrain::model
