// The start banner rank 0 prints before training: the resolved configuration, the topology
// (hosts, ranks per node, groups) and the strategy, so a log says what ran.
#pragma once
#include <string>
#include <vector>

#include "shardtrain/cli/commands.h"
#include "shardtrain/cli/options.h"
#include "shardtrain/comm/process_groups.h"

namespace shardtrain::cli {

// hosts: every rank's host, by rank. Pure apart from formatting.
std::string start_banner(const TrainOptions& o, const Topology& topo, const std::vector<std::string>& hosts,
                         const comm::ProcessGroups& g, const DeviceChoice& device, int64_t num_params,
                         int64_t global_batch, int threads);

// "vm: ranks 0-1; vm2: ranks 2-3" (consecutive ranks on one host collapse into a range).
std::string host_ranges(const std::vector<std::string>& hosts);

}  // namespace shardtrain::cli
