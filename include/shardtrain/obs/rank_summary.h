// Cross-rank views for rank 0's output: every rank's host (or any string), and each progress
// step's phase breakdown as min / median / max over ranks with the straggler named.
#pragma once
#include <mpi.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shardtrain/runtime/phases.h"

namespace shardtrain::obs {

// Collective over comm: every rank gets every rank's string, by rank (any length, any bytes).
std::vector<std::string> allgather_strings(const std::string& mine, MPI_Comm comm);
// Collective over comm: every rank gets every rank's host name, by rank (allgather_strings).
std::vector<std::string> all_hosts(const std::string& host, MPI_Comm comm);
// The ranks of each host, in runs: "node1: ranks 0-7; node2: ranks 8-15".
std::string host_ranges(const std::vector<std::string>& hosts);

// Collective over comm: gathers every rank's phases to rank 0, which adds "phases_across_ranks"
// and "straggler" to `extra` (the metrics line) and returns the log line; other ranks return "".
std::string summarize_across_ranks(const runtime::PhaseTimes& mine, nlohmann::json& extra,
                                   MPI_Comm comm, const std::vector<std::string>& hosts);

// The log line for a summary (pure): "step time by phase over 4 ranks (min/median/max s): ..."
std::string breakdown_line(const runtime::PhaseSummary& s, int ranks,
                           const std::vector<std::string>& hosts);

}  // namespace shardtrain::obs
