// Which GPU each rank drives: its place among the ranks on its machine, never the simulated
// nodes of --ranks-per-node, and a refusal when a machine has more ranks than GPUs.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "shardtrain/cli/commands.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/mpi_env.h"

using namespace shardtrain;

namespace {
// A machine's ranks in world order, as MPI_COMM_TYPE_SHARED numbers them (key = world rank).
std::vector<int> gpus_of_machine(int ranks, int gpus) {
  std::vector<int> chosen;
  for (int r = 0; r < ranks; ++r)
    chosen.push_back(comm::gpu_for_rank(r, ranks, gpus, "gpu-node-7"));
  return chosen;
}
}  // namespace

TEST(DeviceChoice, EveryRankOfAMachineGetsItsOwnGpu) {
  EXPECT_EQ(gpus_of_machine(1, 1), std::vector<int>({0}));
  EXPECT_EQ(gpus_of_machine(4, 4), std::vector<int>({0, 1, 2, 3}));
  EXPECT_EQ(gpus_of_machine(2, 8), std::vector<int>({0, 1}))
      << "spare GPUs stay idle; the first ones are used";
  EXPECT_EQ(gpus_of_machine(8, 8), std::vector<int>({0, 1, 2, 3, 4, 5, 6, 7}));
}

// One machine of 4 ranks and 4 GPUs run as 2 simulated nodes of 2 (--ranks-per-node 2), and 2 ranks
// run as 2 nodes of 1: the simulated local ranks repeat, the GPUs must not.
TEST(DeviceChoice, SimulatedNodesOnOneMachineStillGetDistinctGpus) {
  for (const auto& [world, per_node] : std::vector<std::pair<int, int>>{{4, 2}, {2, 1}, {8, 4}}) {
    std::set<int> gpus, simulated_local;
    for (int rank = 0; rank < world; ++rank) {
      const runtime::Topology sim = runtime::topology_from_ranks_per_node(rank, world, per_node);
      simulated_local.insert(sim.local_rank);
      // The real machine holds every rank: its local rank is the world rank here.
      gpus.insert(comm::gpu_for_rank(rank, world, world, "one-machine"));
    }
    EXPECT_EQ(static_cast<int>(simulated_local.size()), per_node)
        << "the simulated layout repeats local ranks";
    EXPECT_EQ(static_cast<int>(gpus.size()), world)
        << world << " ranks as nodes of " << per_node << " share a GPU";
    EXPECT_EQ(*gpus.rbegin(), world - 1);
  }
}

// Two machines of 2 ranks each: each machine numbers its own ranks from 0, so both use GPUs 0
// and 1.
TEST(DeviceChoice, EachMachineNumbersItsOwnRanks) {
  const std::vector<std::string> host_of_rank = {"a", "b", "a", "b"};  // round-robin placement
  std::vector<int> got;
  for (size_t rank = 0; rank < host_of_rank.size(); ++rank) {
    int local = 0, size = 0;
    for (size_t r = 0; r < host_of_rank.size(); ++r) {
      if (host_of_rank[r] != host_of_rank[rank]) continue;
      local += r < rank;
      ++size;
    }
    got.push_back(comm::gpu_for_rank(local, size, 2, host_of_rank[rank]));
  }
  EXPECT_EQ(got, std::vector<int>({0, 0, 1, 1}));
}

TEST(DeviceChoice, MoreRanksThanGpusIsAUsageErrorNamingHostRanksAndGpus) {
  for (const auto& [ranks, gpus, gpu_word] : std::vector<std::tuple<int, int, std::string>>{
           {2, 1, "1 GPU "}, {3, 2, "2 GPUs "}, {9, 8, "8 GPUs "}}) {
    try {
      comm::gpu_for_rank(0, ranks, gpus, "gpu-node-7");
      ADD_FAILURE() << ranks << " ranks on " << gpus << " GPUs were accepted";
    } catch (const runtime::UsageError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("--device"), std::string::npos) << m;
      EXPECT_NE(m.find("host gpu-node-7"), std::string::npos) << m;
      EXPECT_NE(m.find("runs " + std::to_string(ranks) + " ranks"), std::string::npos) << m;
      EXPECT_NE(m.find("sees " + gpu_word), std::string::npos) << m;
      EXPECT_NE(m.find("--device cpu"), std::string::npos) << "says what to do: " << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << "one line: " << m;
    }
  }
  EXPECT_NO_THROW(comm::gpu_for_rank(1, 2, 2, "h"));
}
