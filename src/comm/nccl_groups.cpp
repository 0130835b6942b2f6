#include <memory>

#include "shardtrain/comm/nccl_communicator.h"
#include "shardtrain/cuda/device_memory.h"
#include "shardtrain/cuda/nccl_watchdog.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/logging.h"

namespace shardtrain::comm {

ParallelDims make_nccl_groups(const GroupLayout& given, const runtime::Topology& topo,
                              const std::string& host) {
  const GroupLayout layout = with_lone_context(given, topo);  // the MPI split's colors, too
  // The world is bootstrapped once over MPI; the shard and replicate groups are split from it
  // (collective over the world, in this order on every rank), each with its own resources.
  const int64_t free_before = cuda::device_free_bytes();
  const NcclCommunicator* world = nullptr;
  ParallelDims pg = make_groups(layout, topo, [&](runtime::MpiComm c, const char* name) {
    const std::string n = name;
    std::unique_ptr<NcclCommunicator> made;
    if (n == "world") {
      cuda::NcclComm nccl = cuda::NcclComm::bootstrap(c.get());
      made = std::make_unique<NcclCommunicator>(std::move(c), n, std::move(nccl));
      world = made.get();
    } else {
      const auto [color, key] = layout.color_key(n);
      made = std::make_unique<NcclCommunicator>(std::move(c), n, world->split(color, key));
    }
    return made;
  });
  std::vector<ncclComm_t> comms;
  for (Communicator* c : pg.every()) {
    const auto* nc = static_cast<const NcclCommunicator*>(c);
    comms.push_back(nc->nccl());
    comms.push_back(nc->nccl_reduce());
    c->barrier();  // one collective on each lane: NCCL connects lazily, and its buffers come with
                   // the connections
  }
  if (topo.rank == 0)
    runtime::log::info("NCCL: " + std::to_string(comms.size()) +
                       " communicators (world, shard, replicate; gather and reduce lanes) hold " +
                       std::to_string((free_before - cuda::device_free_bytes()) >> 20) +
                       " MiB of device memory on rank 0");
  pg.watchdog = std::make_shared<cuda::NcclWatchdog>(std::move(comms), cuda::current_device(),
                                                     topo.rank, host);
  return pg;
}

}  // namespace shardtrain::comm
