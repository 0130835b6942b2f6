#include "shardtrain/ckpt/async_saver.h"

#include "shardtrain/runtime/clock.h"

#include <chrono>

#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/logging.h"

namespace shardtrain::ckpt {

AsyncSaver::AsyncSaver() {
  int level = 0;
  MPI_CHECK(MPI_Query_thread(&level));
  if (level < MPI_THREAD_MULTIPLE)
    throw runtime::UsageError(
        "--async-save needs an MPI with MPI_THREAD_MULTIPLE; drop --async-save to save "
        "synchronously");
  comm_ = runtime::MpiComm::dup();
}

AsyncSaver::~AsyncSaver() {
  if (!thread_.joinable()) return;
  // Unwinding after a failure: the write may wait on a dead rank; main's MPI_Abort ends it.
  if (std::uncaught_exceptions() > 0)
    thread_.detach();
  else
    thread_.join();
}

void AsyncSaver::wait() {
  if (thread_.joinable()) thread_.join();
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

double AsyncSaver::start(const std::string& final_path, const StateRegistry& state,
                         const StripeOptions& stripe, int keep) {
  const runtime::Stopwatch clock;
  wait();
  auto snap = state.snapshot(/*copy=*/true);
  const double blocked = clock.seconds();
  thread_ = std::thread([this, snap = std::move(snap), final_path, stripe, keep, clock] {
    try {
      write_and_publish(final_path, comm_.get(), snap, stripe, keep);
      runtime::log::info("checkpoint " + final_path + " written in the background (" +
                         std::to_string(clock.seconds()) + " s)");
    } catch (...) {
      error_ = std::current_exception();
    }
  });
  return blocked;
}

}  // namespace shardtrain::ckpt
