// The hang watchdog. Every rank's thread exchanges a heartbeat (each group's issued and completed
// collective sequence numbers, and how long the oldest has been stuck) over a duplicate of
// MPI_COMM_WORLD, a side channel that the training collectives never use. When a collective has
// not completed within the timeout, every rank reaches the same verdict from the same heartbeats:
// it names the ranks and hosts that have not reached that collective, dumps its own last
// collectives, and the job exits with kExitCollectiveTimeout instead of hanging. When the thread's
// own work fails (a completion probe meets a sticky CUDA error), it prints one line naming the
// rank, host and error and aborts the job with the same code.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "shardtrain/comm/parallel_dims.h"
#include "shardtrain/runtime/mpi_env.h"

namespace shardtrain::obs {

constexpr int kWatchedGroups = 3;  // world, shard, replicate

struct GroupBeat {
  double group_id = 0;  // lowest world rank in the group: members of one group share it
  double started = 0, finished = 0, oldest_in_flight = 0, oldest_op = 0, oldest_age_s = 0;
};
struct Heartbeat {
  std::array<GroupBeat, kWatchedGroups> groups{};
  double stopping = 0;  // this rank has finished training
};
static_assert(std::is_trivially_copyable_v<Heartbeat>, "heartbeats travel as raw bytes");

struct Verdict {
  bool stuck = false;
  int group = 0;    // index into the watched groups
  int64_t seq = 0;  // the stuck collective
  int op = 0;
  double age_s = 0;          // the longest any rank has waited on it
  std::vector<int> waiting;  // ranks blocked in it
  std::vector<int> missing;  // group members that have not issued it yet
};

// Pure: the oldest collective any rank has been stuck on for more than timeout_s, and who is
// waiting in it and who has not reached it.
Verdict judge(const std::vector<Heartbeat>& beats, double timeout_s);
std::string verdict_message(const Verdict& v, const std::vector<Heartbeat>& beats,
                            const std::vector<std::string>& hosts,
                            const std::vector<std::string>& group_names, double timeout_s,
                            int exit_code);

class CollectiveWatchdog {
 public:
  // Collective over MPI_COMM_WORLD; watches this rank's world, shard and replicate groups.
  CollectiveWatchdog(const comm::ParallelDims& groups, std::vector<std::string> hosts,
                     double timeout_s, int dump_last);
  ~CollectiveWatchdog();  // keeps exchanging until every rank has stopped, then joins
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

 private:
  void run();
  Heartbeat beat() const;
  [[noreturn]] void report_and_exit(const Verdict& v, const std::vector<Heartbeat>& beats);
  std::array<const comm::Communicator*, kWatchedGroups> groups_;
  std::vector<std::string> hosts_;
  std::array<double, kWatchedGroups> group_ids_{};
  double timeout_s_, interval_s_;
  int dump_last_, rank_ = 0, world_ = 1;
  runtime::MpiComm side_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> abandon_{false};  // unwinding from an error: leave at once, peers or not
  std::thread thread_;
};

}  // namespace shardtrain::obs
