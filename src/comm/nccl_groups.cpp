#include <memory>

#include "shardtrain/comm/nccl_communicator.h"
#include "shardtrain/cuda/nccl_watchdog.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::comm {
namespace {
std::unique_ptr<Communicator> nccl_split(int color, int key, const char* name) {
  MPI_Comm c;
  MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, color, key, &c));
  return std::make_unique<NcclCommunicator>(MpiComm(c), name);
}
}  // namespace

ProcessGroups make_nccl_groups(Sharding s, const Topology& topo, int shard_group_size, const std::string& host) {
  ProcessGroups pg;
  pg.layout = group_layout(s, topo, shard_group_size);
  pg.world = nccl_split(0, topo.rank, "world");
  pg.shard = nccl_split(pg.layout.shard_color, pg.layout.shard_rank, "shard");
  pg.replicate = nccl_split(pg.layout.replicate_color, pg.layout.replicate_rank, "replicate");
  std::vector<ncclComm_t> comms;
  for (const Communicator* c : {pg.world.get(), pg.shard.get(), pg.replicate.get()})
    comms.push_back(static_cast<const NcclCommunicator*>(c)->nccl());
  pg.watchdog = std::make_shared<cuda::NcclWatchdog>(std::move(comms), topo.rank, host);
  return pg;
}

}  // namespace shardtrain::comm
