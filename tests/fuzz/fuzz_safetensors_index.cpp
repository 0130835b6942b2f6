// model.safetensors.index.json: the weight_map of a sharded model.
#include "fuzz_util.h"
#include "shardtrain/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  shardtrain::fuzz::expect_clean([&] {
    const auto map = shardtrain::io::parse_safetensors_index(
        std::string(reinterpret_cast<const char*>(data), size), "fuzz.index.json");
    for (const auto& [tensor, file] : map)
      if (file.empty() || file.find('/') != std::string::npos)
        __builtin_trap();  // never leaves the directory
  });
  return 0;
}
