#include <memory>

#include "shardtrain/comm/nccl_communicator.h"
#include "shardtrain/cuda/nccl_watchdog.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::comm {

ProcessGroups make_nccl_groups(const GroupLayout& layout, const Topology& topo, const std::string& host) {
  ProcessGroups pg = make_groups(layout, topo, [](MpiComm c, const char* name) {
    return std::make_unique<NcclCommunicator>(std::move(c), name);  // ncclUniqueId over this group
  });
  std::vector<ncclComm_t> comms;
  for (const Communicator* c : pg.all())
    comms.push_back(static_cast<const NcclCommunicator*>(c)->nccl());
  pg.watchdog = std::make_shared<cuda::NcclWatchdog>(std::move(comms), topo.rank, host);
  return pg;
}

}  // namespace shardtrain::comm
