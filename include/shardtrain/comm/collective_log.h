// Sequence numbers and a short history of one communicator's collectives, for the hang watchdog
// (which collective is stuck, who has not reached it) and the step-time breakdown (exposed wait).
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace shardtrain::comm {

enum class Op {
  kAllGather = 0,
  kReduceScatter,
  kAllReduce,
  kBroadcast,
  kBarrier,
  kSendRecv,
  kAllToAll
};
constexpr int kNumOps = 7;
const char* op_name(Op op);

struct CollectiveRecord {
  int64_t seq = 0;  // 1-based, per communicator, in issue order (the same on every member)
  int op = 0;       // comm::Op
  int64_t bytes = 0;
  double started_s = 0;        // monotonic seconds (CollectiveLog::now)
  double finished_s = -1;      // < 0: still in flight
  double wait_started_s = -1;  // >= 0: the host is blocked in wait() on it since then
  bool probed = false;         // completion comes from a probe (NCCL), not from the wait
};

class CollectiveLog {
 public:
  explicit CollectiveLog(size_t keep = 64) : keep_(keep) {}
  static double now();  // steady clock, seconds

  // A collective was issued. done (optional) tells asynchronously whether it has completed
  // (NCCL: its CUDA event); without it, finished() must be called.
  int64_t started(Op op, int64_t bytes, std::function<bool()> done = nullptr);
  void finished(int64_t seq);
  void waiting(int64_t seq);      // the host starts blocking on it
  void add_wait(double seconds);  // host time blocked on this communicator's collectives

  struct State {
    int64_t started = 0, finished = 0;  // highest sequence numbers issued and completed in order
    int64_t oldest_in_flight = 0;       // 0: none
    int oldest_op = 0;
    // How long the oldest in-flight collective has been stuck: since issue for probed (NCCL)
    // ones, since the host began to wait for the others (a prefetch is not stuck while unused).
    double oldest_age_s = 0;
  };
  State state();                            // polls the done() probes first
  std::vector<CollectiveRecord> history();  // the last `keep` collectives, oldest first
  double wait_seconds() const;

 private:
  void poll_locked();
  CollectiveRecord* find_locked(int64_t seq);  // nullptr once dropped
  mutable std::mutex mu_;
  size_t keep_;
  int64_t next_ = 0;
  double wait_s_ = 0;
  std::deque<CollectiveRecord> recent_;
  std::deque<std::pair<int64_t, std::function<bool()>>> probes_;
};

std::string describe(const CollectiveRecord& r, double now_s);  // "#12 all_gather 4.0 MiB, 0.003 s"

}  // namespace shardtrain::comm
