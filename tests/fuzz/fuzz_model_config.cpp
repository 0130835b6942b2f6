// config.json -> ModelConfig, then the validation every command runs on it.
#include "fuzz_util.h"
#include "shardtrain/model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  shardtrain::fuzz::expect_clean([&] {
    const auto c = shardtrain::model::model_from_hf_text(
        std::string(reinterpret_cast<const char*>(data), size), "fuzz/config.json");
    c.validate();
    if (c.num_params() <= 0 || c.head_dim() <= 0)
      __builtin_trap();  // validated sizes give a real model
  });
  return 0;
}
