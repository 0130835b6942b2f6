#include "shardtrain/cuda/nccl_watchdog.h"

#include "shardtrain/cuda/cuda_handles.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/mpi_env.h"
#include "shardtrain/runtime/signals.h"

namespace shardtrain::cuda {

NcclWatchdog::NcclWatchdog(std::vector<ncclComm_t> comms, int device, int rank, std::string host,
                           std::chrono::milliseconds period)
    : comms_(std::move(comms)),
      device_(device),
      rank_(rank),
      host_(std::move(host)),
      period_(period),
      thread_([this] { run(); }) {}

NcclWatchdog::~NcclWatchdog() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void NcclWatchdog::run() {
  // Any failure here (an NCCL error, a sticky CUDA error in set_device) is one line and exit code
  // 76, never an exception escaping the thread (std::terminate).
  runtime::run_helper_thread(
      "NCCL watchdog", rank_, host_, runtime::kExitCollectiveTimeout, [this] { poll(); },
      [this](int code) {
        for (ncclComm_t c : comms_) ncclCommAbort(c);  // unblocks kernels waiting on peers
        runtime::MpiEnv::abort_from_thread(code);
      });
}

void NcclWatchdog::poll() {
  set_device(device_);  // before any CUDA call on this thread
  while (!stop_) {
    for (ncclComm_t c : comms_) {
      ncclResult_t async = ncclSuccess;
      const ncclResult_t rc = ncclCommGetAsyncError(c, &async);
      const ncclResult_t bad = rc != ncclSuccess ? rc : async;
      if (bad == ncclSuccess || bad == ncclInProgress) continue;
      throw runtime::Error(std::string("NCCL asynchronous error: ") + ncclGetErrorString(bad) +
                           "; " + ncclGetLastError(c) +
                           "; aborting the NCCL communicators and the job");
    }
    std::this_thread::sleep_for(period_);
  }
}

}  // namespace shardtrain::cuda
