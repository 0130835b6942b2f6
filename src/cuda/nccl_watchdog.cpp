#include "shardtrain/cuda/nccl_watchdog.h"

#include <iostream>

#include "shardtrain/cuda/cuda_handles.h"
#include "shardtrain/runtime/mpi_env.h"

namespace shardtrain::cuda {

NcclWatchdog::NcclWatchdog(std::vector<ncclComm_t> comms, int device, int rank, std::string host,
                           std::chrono::milliseconds period)
    : comms_(std::move(comms)), device_(device), rank_(rank), host_(std::move(host)), period_(period),
      thread_([this] { run(); }) {}

NcclWatchdog::~NcclWatchdog() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void NcclWatchdog::run() {
  set_device(device_);  // before any CUDA call on this thread
  while (!stop_) {
    for (ncclComm_t c : comms_) {
      ncclResult_t async = ncclSuccess;
      const ncclResult_t rc = ncclCommGetAsyncError(c, &async);
      const ncclResult_t bad = rc != ncclSuccess ? rc : async;
      if (bad == ncclSuccess || bad == ncclInProgress) continue;
      std::cerr << "shardtrain: fatal: NCCL asynchronous error on rank " << rank_ << " (" << host_
                << "): " << ncclGetErrorString(bad) << "; " << ncclGetLastError(c)
                << ". Aborting the NCCL communicators and the job." << std::endl;
      for (ncclComm_t other : comms_) ncclCommAbort(other);  // unblocks kernels waiting on peers
      runtime::MpiEnv::abort(1);
    }
    std::this_thread::sleep_for(period_);
  }
}

}  // namespace shardtrain::cuda
