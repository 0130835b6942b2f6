// The safetensors header parser: length prefix, JSON header, offsets against the data section.
#include "fuzz_util.h"
#include "shardtrain/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  shardtrain::fuzz::expect_clean([&] {
    const auto h = shardtrain::io::parse_safetensors_header(data, size, "fuzz.safetensors");
    // What a reader then relies on: every tensor lies inside the file.
    for (const auto& t : h.tensors)
      if (h.data_start + t.end > size ||
          t.numel() * static_cast<int64_t>(shardtrain::io::st_dtype_size(t.dtype)) !=
              static_cast<int64_t>(t.end - t.begin))
        __builtin_trap();
  });
  return 0;
}
