// A helper thread (the NCCL and collective watchdogs) whose own work fails: one line naming the
// thread, rank, host and error on stderr, then the job's end with the given code, never
// std::terminate. The end is injected here; in the trainer it aborts the MPI job.
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/mpi_env.h"

using namespace shardtrain;

TEST(HelperThread, FailureLineNamesThreadRankHostAndError) {
  EXPECT_EQ(
      runtime::helper_thread_failure("NCCL watchdog", 3, "gpu-node-7",
                                     "CUDA error: an illegal memory access was encountered", 76),
      "shardtrain: fatal: NCCL watchdog on rank 3 (gpu-node-7): CUDA error: an illegal memory "
      "access was encountered. "
      "Exiting with code 76.");
  // Line breaks inside the error would split the line; a trailing period is not doubled.
  EXPECT_EQ(
      runtime::helper_thread_failure("collective watchdog", 0, "h", "first\nsecond.\n", 76),
      "shardtrain: fatal: collective watchdog on rank 0 (h): first; second. Exiting with code 76.");
}

namespace {
struct Outcome {
  std::vector<int> ends;  // the codes end() was called with
  std::string err;        // what the thread printed on stderr
};

// Runs body through run_helper_thread on its own thread, as the watchdogs do.
Outcome run_on_thread(const std::function<void()>& body) {
  Outcome o;
  testing::internal::CaptureStderr();
  std::thread t([&] {
    runtime::run_helper_thread("collective watchdog", 2, "node-b", 76, body,
                               [&](int code) { o.ends.push_back(code); });
  });
  t.join();
  o.err = testing::internal::GetCapturedStderr();
  return o;
}
}  // namespace

TEST(HelperThread, AnErrorEscapingTheBodyIsOneLineAndTheCollectiveFailureCode) {
  // The fake error source: what CUDA_CHECK throws for a sticky error in a completion probe.
  const Outcome o = run_on_thread([] {
    throw runtime::Error(
        "CUDA error: an illegal memory access was encountered [cudaEventQuery(e_)] at x.cpp:1 "
        "(rank 2 on host node-b)");
  });
  ASSERT_EQ(o.ends, std::vector<int>({76})) << "ended once, with the documented code";
  EXPECT_EQ(o.err,
            "shardtrain: fatal: collective watchdog on rank 2 (node-b): CUDA error: an illegal "
            "memory access was "
            "encountered [cudaEventQuery(e_)] at x.cpp:1 (rank 2 on host node-b). Exiting with "
            "code 76.\n");
}

TEST(HelperThread, LibTorchErrorsLoseTheirBacktraceAndOtherThrowsAreCaughtToo) {
  const Outcome torch = run_on_thread([] { TORCH_CHECK(false, "device-side assert triggered"); });
  ASSERT_EQ(torch.ends, std::vector<int>({76}));
  EXPECT_NE(torch.err.find("on rank 2 (node-b): device-side assert triggered"), std::string::npos)
      << torch.err;
  EXPECT_EQ(std::count(torch.err.begin(), torch.err.end(), '\n'), 1) << "one line:\n" << torch.err;

  const Outcome odd = run_on_thread([] { throw 42; });
  ASSERT_EQ(odd.ends, std::vector<int>({76}));
  EXPECT_NE(odd.err.find("(node-b): an unknown exception. Exiting with code 76."),
            std::string::npos)
      << odd.err;
}

TEST(HelperThread, ABodyThatReturnsEndsNothing) {
  bool ran = false;
  const Outcome o = run_on_thread([&] { ran = true; });
  EXPECT_TRUE(ran);
  EXPECT_TRUE(o.ends.empty());
  EXPECT_EQ(o.err, "");
}
