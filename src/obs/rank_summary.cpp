#include "shardtrain/obs/rank_summary.h"

#include <algorithm>
#include <cstdio>

#include "shardtrain/runtime/counted.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::obs {

std::vector<std::string> allgather_strings(const std::string& mine, MPI_Comm comm) {
  int size = 1;
  MPI_CHECK(MPI_Comm_size(comm, &size));
  const int len = static_cast<int>(mine.size());
  std::vector<int> lens(size), offsets(size);
  MPI_CHECK(MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, comm));
  int total = 0;
  for (int r = 0; r < size; ++r) {
    offsets[r] = total;
    total += lens[r];
  }
  std::vector<char> all(std::max(total, 1));
  MPI_CHECK(MPI_Allgatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), offsets.data(),
                           MPI_CHAR, comm));
  std::vector<std::string> out;
  for (int r = 0; r < size; ++r)
    out.emplace_back(all.data() + offsets[r], static_cast<size_t>(lens[r]));
  return out;
}

std::vector<std::string> all_hosts(const std::string& host, MPI_Comm comm) {
  return allgather_strings(host, comm);
}

std::string breakdown_line(const runtime::PhaseSummary& s, int ranks,
                           const std::vector<std::string>& hosts) {
  std::string line =
      "step time by phase over " + runtime::counted(ranks, "rank") + " (min/median/max s):";
  char buf[128];
  for (int p = 0; p < runtime::kNumPhases; ++p) {
    std::snprintf(buf, sizeof buf, " %s %.3f/%.3f/%.3f",
                  runtime::phase_name(static_cast<runtime::Phase>(p)), s.min[p], s.median[p],
                  s.max[p]);
    line += buf;
    if (p + 1 < runtime::kNumPhases) line += ",";
  }
  const std::string host = s.straggler < static_cast<int>(hosts.size()) ? hosts[s.straggler] : "?";
  std::snprintf(buf, sizeof buf, " | straggler: rank %d (%s), busy %.3f s vs median %.3f s",
                s.straggler, host.c_str(), s.straggler_busy_s, s.median_busy_s);
  return line + buf;
}

std::string summarize_across_ranks(const runtime::PhaseTimes& mine, nlohmann::json& extra,
                                   MPI_Comm comm, const std::vector<std::string>& hosts) {
  int rank = 0, size = 1;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  std::vector<double> all(rank == 0 ? static_cast<size_t>(size) * runtime::kNumPhases : 0);
  MPI_CHECK(MPI_Gather(mine.s.data(), runtime::kNumPhases, MPI_DOUBLE, all.data(),
                       runtime::kNumPhases, MPI_DOUBLE, 0, comm));
  if (rank != 0) return "";
  std::vector<runtime::PhaseTimes> per_rank(size);
  for (int r = 0; r < size; ++r)
    for (int p = 0; p < runtime::kNumPhases; ++p)
      per_rank[r].s[p] = all[static_cast<size_t>(r) * runtime::kNumPhases + p];
  const runtime::PhaseSummary s = runtime::summarize_phases(per_rank);
  for (int p = 0; p < runtime::kNumPhases; ++p)
    extra["phases_across_ranks"][runtime::phase_name(static_cast<runtime::Phase>(p))] = {
        {"min", s.min[p]}, {"median", s.median[p]}, {"max", s.max[p]}};
  extra["straggler"] = {
      {"rank", s.straggler},
      {"host", s.straggler < static_cast<int>(hosts.size()) ? hosts[s.straggler] : ""},
      {"busy_s", s.straggler_busy_s},
      {"median_busy_s", s.median_busy_s},
      {"step_time_s", per_rank[s.straggler].total()}};
  return breakdown_line(s, size, hosts);
}

std::string host_ranges(const std::vector<std::string>& hosts) {
  std::string out;
  for (size_t i = 0; i < hosts.size();) {
    size_t j = i;
    while (j + 1 < hosts.size() && hosts[j + 1] == hosts[i]) ++j;
    out += (out.empty() ? "" : "; ") + hosts[i] + ": " +
           (i == j ? "rank " + std::to_string(i)
                   : "ranks " + std::to_string(i) + "-" + std::to_string(j));
    i = j + 1;
  }
  return out;
}

}  // namespace shardtrain::obs
