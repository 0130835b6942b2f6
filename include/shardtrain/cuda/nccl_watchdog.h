// Polls ncclCommGetAsyncError on every communicator from a thread. NCCL reports a failed peer or
// network error there while the collective itself may never return. On any error, its own
// included (a sticky CUDA error), the watchdog prints one line naming the rank, host and error,
// aborts the communicators and ends the MPI job with kExitCollectiveTimeout (76).
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
  void poll();  // until stopped; throws on an error
  std::vector<ncclComm_t> comms_;
  int device_, rank_;
  std::string host_;
  std::chrono::milliseconds period_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace shardtrain::cuda
