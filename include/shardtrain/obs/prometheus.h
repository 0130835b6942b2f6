// Prometheus text exposition (format 0.0.4) of the training series, one sample set per rank,
// labelled job, host and rank. Pure: the exporter feeds it gathered values and serves the text.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "shardtrain/comm/communicator.h"
#include "shardtrain/runtime/phases.h"

namespace shardtrain::obs {

// One rank's latest values. Counters are totals since the process started.
// DPO's metrics, TRL's names, in the order every producer and sink uses.
inline constexpr const char* kPreferenceMetricNames[] = {"rewards/chosen",     "rewards/rejected",
                                                         "rewards/accuracies", "rewards/margins",
                                                         "logps/chosen",       "logps/rejected"};
inline constexpr int kNumPreferenceMetrics = 6;

struct RankSeries {
  int rank = 0;
  std::string host;
  double step = 0, loss = 0, lr = 0, tokens_per_s = 0, tflops_per_device = 0, mfu = 0,
         step_seconds = 0;
  runtime::PhaseTimes phases;
  double host_peak_rss = 0, gpu_peak_allocated = -1, gpu_peak_reserved = -1;  // < 0: not a GPU rank
  double checkpoint_seconds = 0;  // the last checkpoint's duration
  double skipped_steps = 0;  // optimizer steps skipped for a non-finite loss (--on-nonfinite skip)
  double pairs = 0;          // DPO: the last step's pairs (0: not a DPO run), and its metrics
  std::array<double, kNumPreferenceMetrics> preference{};
  static constexpr int kProcessGroups = 4;  // world, shard, replicate, context
  std::array<std::array<double, comm::kNumOps>, kProcessGroups> calls{}, bytes{};

  // A fixed-length vector of doubles, so ranks can MPI_Gather them (host and rank travel apart).
  std::vector<double> pack() const;
  static RankSeries unpack(const double* v, int rank, const std::string& host);
  static int packed_size();
};

const char* group_name(int g);  // world, shard, replicate
std::string escape_label_value(const std::string& v);
std::string exposition(const std::string& job, const std::vector<RankSeries>& ranks);

}  // namespace shardtrain::obs
