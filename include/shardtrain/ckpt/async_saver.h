// --async-save: the step boundary only copies this rank's shards to host memory; a background
// thread writes and publishes the checkpoint while training goes on. The next save, and the
// end of training, wait for it. Its MPI traffic uses its own duplicate of the world
// communicator, so it never interleaves with training's collectives (needs MPI_THREAD_MULTIPLE).
#pragma once
#include <exception>
#include <string>
#include <thread>

#include "shardtrain/ckpt/checkpoint.h"
#include "shardtrain/runtime/mpi_env.h"

namespace shardtrain::ckpt {

class AsyncSaver {
 public:
  AsyncSaver();  // collective over the world
  ~AsyncSaver();
  AsyncSaver(const AsyncSaver&) = delete;
  AsyncSaver& operator=(const AsyncSaver&) = delete;

  // Waits for the previous save, takes every registered state (host copies of the tensors), starts
  // the write; returns the seconds the caller was blocked.
  double start(const std::string& final_path, const StateRegistry& state,
               const StripeOptions& stripe, int keep);
  void wait();  // rethrows a failure of the background write

 private:
  runtime::MpiComm comm_;
  std::thread thread_;
  std::exception_ptr error_;
};

}  // namespace shardtrain::ckpt
