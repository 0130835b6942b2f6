#include "shardtrain/obs/collective_watchdog.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/signals.h"

namespace shardtrain::obs {

Verdict judge(const std::vector<Heartbeat>& beats, double timeout_s) {
  Verdict v;
  for (const auto& b : beats)
    for (int g = 0; g < kWatchedGroups; ++g)
      if (b.groups[g].oldest_in_flight > 0 && b.groups[g].oldest_age_s > timeout_s &&
          (!v.stuck || b.groups[g].oldest_age_s > v.age_s)) {
        v.stuck = true;
        v.group = g;
        v.seq = static_cast<int64_t>(b.groups[g].oldest_in_flight);
        v.op = static_cast<int>(b.groups[g].oldest_op);
        v.age_s = b.groups[g].oldest_age_s;
      }
  if (!v.stuck) return v;
  double gid = -1;
  for (const auto& b : beats)
    if (b.groups[v.group].oldest_in_flight == static_cast<double>(v.seq) &&
        b.groups[v.group].oldest_age_s == v.age_s)
      gid = b.groups[v.group].group_id;
  for (size_t r = 0; r < beats.size(); ++r) {
    const GroupBeat& g = beats[r].groups[v.group];
    if (g.group_id != gid) continue;  // another shard/replicate group with its own numbering
    if (g.started < static_cast<double>(v.seq))
      v.missing.push_back(static_cast<int>(r));
    else if (g.oldest_in_flight == static_cast<double>(v.seq))
      v.waiting.push_back(static_cast<int>(r));
  }
  return v;
}

namespace {
std::string rank_list(const std::vector<int>& ranks, const std::vector<std::string>& hosts) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const int r = ranks[i];
    s += (i ? ", " : "") + std::string("rank ") + std::to_string(r) + " (" +
         (r < static_cast<int>(hosts.size()) ? hosts[r] : "?") + ")";
  }
  return s;
}
}  // namespace

std::string verdict_message(const Verdict& v, const std::vector<Heartbeat>& beats,
                            const std::vector<std::string>& hosts,
                            const std::vector<std::string>& group_names, double timeout_s,
                            int exit_code) {
  char head[256];
  std::snprintf(head, sizeof head,
                "collective watchdog: %s #%lld on the %s group has not completed after %.1f s "
                "(--collective-timeout %.0f). ",
                comm::op_name(static_cast<comm::Op>(v.op)), static_cast<long long>(v.seq),
                group_names[v.group].c_str(), v.age_s, timeout_s);
  std::string msg = head;
  if (!v.missing.empty()) {
    msg += "Not reached by " + rank_list(v.missing, hosts) + ": ";
    for (size_t i = 0; i < v.missing.size(); ++i) {
      const GroupBeat& g = beats[v.missing[i]].groups[v.group];
      msg += (i ? "; " : "") + std::string("rank ") + std::to_string(v.missing[i]) +
             " last issued #" + std::to_string(static_cast<long long>(g.started));
    }
    msg += ". ";
  } else {
    msg +=
        "Every member has issued it, so the transport itself is stuck (network, NCCL, a dead "
        "link). ";
  }
  if (!v.waiting.empty()) msg += "Waiting in it: " + rank_list(v.waiting, hosts) + ". ";
  return msg + "Exiting with code " + std::to_string(exit_code) + ".";
}

CollectiveWatchdog::CollectiveWatchdog(const comm::ParallelDims& groups,
                                       std::vector<std::string> hosts, double timeout_s,
                                       int dump_last)
    : groups_{groups.world.get(), groups.shard.get(), groups.replicate.get()},
      hosts_(std::move(hosts)),
      timeout_s_(timeout_s),
      interval_s_(std::clamp(timeout_s / 5, 0.1, 5.0)),
      dump_last_(dump_last) {
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_));
  for (int g = 0; g < kWatchedGroups; ++g) {
    int lowest = rank_;  // names the group instance: members of one shard group agree on it
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &lowest, 1, MPI_INT, MPI_MIN, groups_[g]->mpi()));
    group_ids_[g] = lowest;
  }
  side_ = runtime::MpiComm::dup();
  const std::string host = rank_ < static_cast<int>(hosts_.size()) ? hosts_[rank_] : "?";
  // A failure of the thread itself (a sticky CUDA error in a completion probe, an MPI error) is
  // one line and exit code 76, never an exception escaping the thread (std::terminate).
  thread_ = std::thread([this, host] {
    runtime::run_helper_thread("collective watchdog", rank_, host, runtime::kExitCollectiveTimeout,
                               [this] { run(); });
  });
}

CollectiveWatchdog::~CollectiveWatchdog() {
  // Unwinding from an error: main prints it and aborts the job, so waiting for peers could hang;
  // the thread leaves within a poll instead (its pending request dies with the job).
  if (std::uncaught_exceptions() > 0) abandon_ = true;
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

Heartbeat CollectiveWatchdog::beat() const {
  Heartbeat b;
  for (int g = 0; g < kWatchedGroups; ++g) {
    const auto s = groups_[g]->log().state();
    b.groups[g] = {group_ids_[g],
                   static_cast<double>(s.started),
                   static_cast<double>(s.finished),
                   static_cast<double>(s.oldest_in_flight),
                   static_cast<double>(s.oldest_op),
                   s.oldest_age_s};
  }
  b.stopping = stop_ ? 1 : 0;
  return b;
}

void CollectiveWatchdog::run() {
  groups_[0]->bind_thread();  // its probes query this rank's GPU events: select that GPU first
  std::vector<Heartbeat> beats(
      world_);  // plain doubles: gathered as bytes, the same layout everywhere
  while (true) {
    const auto until =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(interval_s_);
    while (!stop_ && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (abandon_) return;
    const Heartbeat mine = beat();
    MPI_Request req;
    if (MPI_Iallgather(&mine, sizeof mine, MPI_BYTE, beats.data(), sizeof mine, MPI_BYTE,
                       side_.get(), &req) != MPI_SUCCESS)
      return;
    int done = 0;
    while (!done) {  // poll, so this thread never sits inside MPI for long
      if (abandon_ || MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return;
      if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (std::all_of(beats.begin(), beats.end(), [](const Heartbeat& b) { return b.stopping != 0; }))
      return;  // every rank leaves after the same round
    const Verdict v = judge(beats, timeout_s_);
    if (v.stuck) report_and_exit(v, beats);
  }
}

void CollectiveWatchdog::report_and_exit(const Verdict& v, const std::vector<Heartbeat>& beats) {
  std::vector<std::string> names;
  for (const auto* g : groups_) names.push_back(g->name());
  if (rank_ == 0)
    std::fprintf(
        stderr, "shardtrain: %s\n",
        verdict_message(v, beats, hosts_, names, timeout_s_, runtime::kExitCollectiveTimeout)
            .c_str());
  const double now = comm::CollectiveLog::now();
  std::string dump = "shardtrain: collective watchdog: rank " + std::to_string(rank_) + " (" +
                     hosts_[rank_] + ") last collectives:";
  for (const auto* g : groups_) {
    auto h = g->log().history();
    if (static_cast<int>(h.size()) > dump_last_) h.erase(h.begin(), h.end() - dump_last_);
    dump += "\n  " + g->name() + ":";
    if (h.empty()) dump += " none";
    for (const auto& r : h) dump += "\n    " + comm::describe(r, now);
  }
  std::fprintf(stderr, "%s\n", dump.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  // Let every rank print before the launcher tears the job down; bounded, never a new hang.
  MPI_Request req;
  if (MPI_Ibarrier(side_.get(), &req) == MPI_SUCCESS) {
    int done = 0;
    for (int i = 0; i < 300 && !done; ++i) {
      MPI_Test(&req, &done, MPI_STATUS_IGNORE);
      if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  std::_Exit(runtime::kExitCollectiveTimeout);
}

}  // namespace shardtrain::obs
