// The start banner rank 0 prints before training: the resolved configuration, the topology
// (hosts, ranks per node, groups) and the strategy, so a log says what ran.
#pragma once
#include <string>
#include <vector>

#include "shardtrain/cli/commands.h"
#include "shardtrain/cli/options.h"
#include "shardtrain/comm/parallel_dims.h"

namespace shardtrain::cli {

// What the run measured at setup, beside the options.
struct BannerFacts {
  int64_t num_params = 0, global_batch = 0;
  int threads = 1;
  int64_t persistent_bytes = 0,
          unsharded_bytes = 0;  // per rank: sharded state vs the whole model's
  int64_t base_bytes = 0,
          adapter_bytes = 0;   // adapters, per rank: the frozen base; the adapters' master + AdamW
  int64_t adapter_params = 0;  // adapters: trainable parameters in the whole model
  int64_t host_bytes = 0;      // --cpu-offload, per rank: the trainable state in host memory
  int64_t weights_bytes_read = 0;  // by this rank, from --weights
  int64_t train_rows = 0, val_rows = 0, seq_len = 0;
  std::string packing, format;  // of the training token file
};

// hosts: every rank's host, by rank. Pure apart from formatting.
std::string start_banner(const TrainOptions& o, const runtime::Topology& topo,
                         const std::vector<std::string>& hosts, const comm::ParallelDims& g,
                         const comm::DeviceChoice& device, const BannerFacts& f);

// The run's first line: what it starts from (pretrained weights, a checkpoint, or random
// initialization, which is rarely what a fine-tuning user wants, so it says how to change it).
std::string start_line(const TrainOptions& o);

// "every 500 steps", "every step", or "only at the end" for 0 (--save-every, --val-every,
// --breakdown-every).
std::string cadence(int64_t every, const std::string& unit);

}  // namespace shardtrain::cli
