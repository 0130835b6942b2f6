// The training loop's own settings (parsed once, validated once). Sharding, optimization,
// checkpoints and observability each have their own struct in their own module.
#pragma once
#include <cstdint>
#include <string>

namespace shardtrain {

struct TrainConfig {
  int64_t steps = 0;       // optimizer steps; 0: derive from epochs
  int64_t epochs = 1;
  int64_t batch_size = 8;  // micro-batch per rank
  int64_t grad_accum = 1;  // micro-batches per optimizer step
  uint64_t seed = 1234;    // init and data order
  int64_t val_every = 0;   // 0: validate only at the end
  int64_t val_batches = 8;  // <= 0: the whole validation file
  int64_t log_every = 10;
  std::string metrics_file;
  double peak_tflops = 0;  // per device, for MFU; 0: from the device name
  void validate() const;   // throws UsageError naming the option
};

}  // namespace shardtrain
