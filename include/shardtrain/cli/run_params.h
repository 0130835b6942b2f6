// The run's settings as the experiment trackers record them (their hyper-parameters).
#pragma once
#include <cstdint>
#include <string>

#include "shardtrain/cli/options.h"
#include "shardtrain/train/run_params.h"

namespace shardtrain::cli {

// o as resolved for the device (param dtype); the figures the loader and engine settle.
train::RunParams run_params(const TrainOptions& o, int world_size, int64_t global_batch,
                            int64_t seq_len, int64_t num_params, const std::string& device);

}  // namespace shardtrain::cli
