// MpiEnv under mpirun: the real machine layout (MPI_COMM_TYPE_SHARED) stays beside the simulated
// nodes of --ranks-per-node=K, so ranks that share a machine never pick the same GPU.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "mpi_gtest_main.h"
#include "shardtrain/cli/commands.h"
#include "shardtrain/runtime/mpi_env.h"

using namespace shardtrain;

namespace {
runtime::MpiEnv* g_env = nullptr;
int g_ranks_per_node = 0;

struct Seen {
  int machine_local = 0, machine_size = 0, sim_local = 0;
};

std::vector<std::string> gather_hosts() {
  char mine[MPI_MAX_PROCESSOR_NAME] = {0};
  std::strncpy(mine, g_env->host().c_str(), sizeof mine - 1);
  std::vector<char> all(static_cast<size_t>(g_env->size()) * MPI_MAX_PROCESSOR_NAME);
  MPI_Allgather(mine, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME,
                MPI_CHAR, MPI_COMM_WORLD);
  std::vector<std::string> hosts;
  for (int r = 0; r < g_env->size(); ++r)
    hosts.emplace_back(all.data() + static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME);
  return hosts;
}

std::vector<Seen> gather_seen() {
  const int mine[3] = {g_env->machine().local_rank, g_env->machine().local_size,
                       g_env->topology().local_rank};
  std::vector<int> all(3 * static_cast<size_t>(g_env->size()));
  MPI_Allgather(mine, 3, MPI_INT, all.data(), 3, MPI_INT, MPI_COMM_WORLD);
  std::vector<Seen> seen;
  for (int r = 0; r < g_env->size(); ++r)
    seen.push_back({all[3 * r], all[3 * r + 1], all[3 * r + 2]});
  return seen;
}
}  // namespace

// The independent reference: ranks grouped by processor name, numbered in world order.
TEST(MpiEnvMpi, MachineLayoutIsTheRealOneWhateverRanksPerNodeSays) {
  const auto hosts = gather_hosts();
  const auto seen = gather_seen();
  for (int r = 0; r < g_env->size(); ++r) {
    int local = 0, size = 0;
    for (int q = 0; q < g_env->size(); ++q) {
      if (hosts[q] != hosts[r]) continue;
      local += q < r;
      ++size;
    }
    EXPECT_EQ(seen[r].machine_local, local) << "rank " << r << " on " << hosts[r];
    EXPECT_EQ(seen[r].machine_size, size) << "rank " << r << " on " << hosts[r];
  }
  const runtime::Topology expected =
      g_ranks_per_node > 0
          ? runtime::topology_from_ranks_per_node(g_env->rank(), g_env->size(), g_ranks_per_node)
          : g_env->machine();
  EXPECT_EQ(g_env->topology().local_rank, expected.local_rank);
  EXPECT_EQ(g_env->topology().local_size, expected.local_size);
  EXPECT_EQ(g_env->topology().node, expected.node);
  EXPECT_EQ(g_env->topology().num_nodes, expected.num_nodes);
}

// With as many GPUs as ranks per machine, the ranks of one machine pick distinct GPUs; under
// --ranks-per-node=1 at 2 ranks on one machine both simulated local ranks are 0 (the old rule
// gave both GPU 0).
TEST(MpiEnvMpi, RanksSharingAMachinePickDistinctGpus) {
  const auto hosts = gather_hosts();
  const auto seen = gather_seen();
  std::map<std::string, std::set<int>> gpus_of_host;
  std::map<std::string, int> ranks_of_host;
  for (int r = 0; r < g_env->size(); ++r) {
    gpus_of_host[hosts[r]].insert(comm::gpu_for_rank(seen[r].machine_local, seen[r].machine_size,
                                                     seen[r].machine_size, hosts[r]));
    ++ranks_of_host[hosts[r]];
  }
  for (const auto& [host, gpus] : gpus_of_host)
    EXPECT_EQ(static_cast<int>(gpus.size()), ranks_of_host[host])
        << "ranks on " << host << " share a GPU";
  if (g_ranks_per_node == 1 && g_env->size() == 2 && hosts[0] == hosts[1]) {
    EXPECT_EQ(seen[0].sim_local, 0);
    EXPECT_EQ(seen[1].sim_local, 0) << "each simulated node of one rank has local rank 0";
    EXPECT_NE(seen[0].machine_local, seen[1].machine_local)
        << "the real local ranks must still differ";
  }
}

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--ranks-per-node=", 17) == 0)
      g_ranks_per_node = std::atoi(argv[i] + 17);
  mpi_gtest_main(argc, argv, g_env);
}
