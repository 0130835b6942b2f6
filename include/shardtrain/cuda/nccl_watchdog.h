// Polls ncclCommGetAsyncError on every communicator from a thread. NCCL reports a failed peer or
// network error there while the collective itself may never return; on any error the watchdog
// aborts the communicators and the MPI job with a message naming the rank and host.
#pragma once
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace shardtrain::cuda {

class NcclWatchdog {
 public:
  // device: the rank's GPU; the thread selects it first, so it never makes a context on GPU 0.
  NcclWatchdog(std::vector<ncclComm_t> comms, int device, int rank, std::string host,
               std::chrono::milliseconds period = std::chrono::milliseconds(100));
  ~NcclWatchdog();
  NcclWatchdog(const NcclWatchdog&) = delete;
  NcclWatchdog& operator=(const NcclWatchdog&) = delete;

 private:
  void run();
  std::vector<ncclComm_t> comms_;
  int device_, rank_;
  std::string host_;
  std::chrono::milliseconds period_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace shardtrain::cuda
