// A whole model held for decoding: its weights by Hugging Face name in the compute dtype on one
// device (the FSDP engine gathers them once), the adapters beside them, and the rotary tables. A
// step runs every unit over a few new tokens per row against a KV cache (model/kv_cache.h), with
// no collective: each rank decodes its own rows.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <map>
#include <string>

#include "shardtrain/model/config.h"
#include "shardtrain/model/kv_cache.h"
#include "shardtrain/model/lora.h"
#include "shardtrain/model/rotary.h"

namespace shardtrain::model {

class Decoder {
 public:
  // weights (and adapters, where lora is enabled): every parameter, any dtype and device; they are
  // cast to `dtype` on `device` once here.
  Decoder(const ModelConfig& cfg, const std::map<std::string, at::Tensor>& weights,
          const std::map<std::string, at::Tensor>& adapters, const LoraConfig& lora,
          const at::Device& device, at::ScalarType dtype);
  const ModelConfig& config() const { return cfg_; }
  // longrope: the original context, past which a sequence takes the long factors; 0: none.
  int64_t long_rope_after() const { return rope_.long_cos.defined() ? rope_.long_after : 0; }
  // A cache for `rows` rows of up to max_len tokens each, prompt included.
  KvCache cache(int64_t rows, int64_t max_len) const;
  // tokens [rows, n] int64 (host) at positions [rows, n] (host; -1: padding) appended to `cache`:
  // the logits [rows, n, V] in fp32 on the host.
  at::Tensor step(const at::Tensor& tokens, const at::Tensor& positions, KvCache& cache) const;

 private:
  ModelConfig cfg_;
  std::map<std::string, at::Tensor> weights_, adapters_;
  LoraConfig lora_;
  at::Device device_;
  at::ScalarType dtype_;
  Rotary rope_;
};

}  // namespace shardtrain::model
