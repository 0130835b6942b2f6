// Where a step's wall time goes on one rank, and its summary across ranks. The phases add up to
// the step: compute phases exclude the time the host was blocked on collectives (exposed_comm).
#pragma once
#include <array>
#include <string>
#include <vector>

namespace shardtrain::runtime {

enum class Phase { kDataWait = 0, kForward, kBackward, kOptimizer, kExposedComm, kCheckpoint };
constexpr int kNumPhases = 6;
const char* phase_name(
    Phase p);  // data_wait, forward, backward, optimizer, exposed_comm, checkpoint

struct PhaseTimes {
  std::array<double, kNumPhases> s{};  // seconds
  double& operator[](Phase p) { return s[static_cast<int>(p)]; }
  double operator[](Phase p) const { return s[static_cast<int>(p)]; }
  double total() const;
  double busy() const { return total() - (*this)[Phase::kExposedComm]; }  // not waiting on others
};

// Summary over ranks for one step (or a window of steps): per phase min, median, max, and the
// straggler: the rank with the most busy time, which the others wait for in their collectives.
struct PhaseSummary {
  std::array<double, kNumPhases> min{}, median{}, max{};
  int straggler = 0;
  double straggler_busy_s = 0, median_busy_s = 0;
};
PhaseSummary summarize_phases(const std::vector<PhaseTimes>& per_rank);

}  // namespace shardtrain::runtime
