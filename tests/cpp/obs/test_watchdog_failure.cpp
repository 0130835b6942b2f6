// The collective watchdog's thread meets an error of its own: a completion probe that fails as
// cudaEventQuery does after a sticky CUDA error (injected here on CPU through a communicator
// whose probe throws). The job must end with one line naming rank, host and error and exit code
// 76, not std::terminate. The test runs this program under mpirun with --child.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

#include "gtest_skip.h"
#include "run_binary.h"
#include "shardtrain/comm/mpi_communicator.h"
#include "shardtrain/comm/parallel_dims.h"
#include "shardtrain/obs/collective_watchdog.h"
#include "shardtrain/obs/rank_summary.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/fast_exit.h"
#include "shardtrain/runtime/mpi_env.h"

using namespace shardtrain;

namespace {
const char* kInjected =
    "CUDA error: an illegal memory access was encountered [cudaEventQuery(e_)] (injected by the "
    "test)";

class NothingToWaitFor : public comm::Work {
 public:
  void wait() override {}
  bool test() { return true; }
};

// An MPI communicator that can issue one collective whose completion probe fails.
class BrokenProbeCommunicator : public comm::MpiCommunicator {
 public:
  using MpiCommunicator::MpiCommunicator;
  comm::WorkPtr issue_broken() {
    return tracked(comm::Op::kAllGather, 1024, std::make_unique<NothingToWaitFor>(),
                   []() -> bool { throw runtime::Error(kInjected); });
  }
};

int child(int argc, char** argv) {
  runtime::MpiEnv env(&argc, &argv);
  comm::GroupLayout layout;  // one shard group over the world, no replicas
  layout.shard_size = env.size();
  layout.shard_rank = env.rank();
  layout.replicate_color = env.rank();
  BrokenProbeCommunicator* world = nullptr;
  comm::ParallelDims groups =
      comm::make_groups(layout, env.topology(), [&](runtime::MpiComm c, const char* name) {
        auto made = std::make_unique<BrokenProbeCommunicator>(std::move(c), name);
        if (std::strcmp(name, "world") == 0) world = made.get();
        return std::unique_ptr<comm::Communicator>(std::move(made));
      });
  const auto hosts = obs::allgather_strings(env.host(), MPI_COMM_WORLD);
  obs::CollectiveWatchdog watchdog(groups, hosts, /*timeout_s=*/1.0,
                                   /*dump_last=*/4);  // a beat every 0.2 s
  const comm::WorkPtr broken = world->issue_broken();
  std::this_thread::sleep_for(std::chrono::seconds(30));
  std::fprintf(stderr, "child: the watchdog did not end the job\n");
  return 0;
}
}  // namespace

TEST(WatchdogFailure, AFailingProbeEndsTheJobWithOneLineAndCode76) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  char host[256] = {0};
  ASSERT_EQ(gethostname(host, sizeof host - 1), 0);
  const std::regex line(
      "shardtrain: fatal: collective watchdog on rank ([0-9]+) \\(([^)]*)\\): (.*)\\. Exiting with "
      "code 76\\.");
  for (int ranks : {1, 2}) {
    const auto r = testing_support::shell(std::string(SHARDTRAIN_MPIEXEC) + std::to_string(ranks) +
                                          " " + self + " --child");
    EXPECT_EQ(r.code, 76) << ranks << " ranks:\n" << r.out;
    int reported = 0;
    std::istringstream lines(r.out);
    for (std::string l; std::getline(lines, l);) {
      std::smatch m;
      if (!std::regex_match(l, m, line)) continue;
      ++reported;
      EXPECT_LT(std::stoi(m[1]), ranks) << l;
      EXPECT_EQ(m[2].str(), host) << l;
      EXPECT_EQ(m[3].str(), kInjected) << l;
    }
    EXPECT_GE(reported, 1) << "no rank reported the failure in one line:\n" << r.out;
    EXPECT_EQ(r.out.find("terminate called"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("did not end the job"), std::string::npos) << r.out;
  }
}

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--child") == 0) return child(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  shardtrain::runtime::fast_exit(skip_aware_status(RUN_ALL_TESTS()));
}
