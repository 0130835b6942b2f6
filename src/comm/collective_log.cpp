#include "shardtrain/comm/collective_log.h"

#include <cstdio>

#include "shardtrain/runtime/clock.h"

namespace shardtrain::comm {

const char* op_name(Op op) {
  static const char* names[kNumOps] = {"all_gather", "reduce_scatter", "all_reduce", "broadcast",
                                       "barrier",    "send_recv",      "all_to_all"};
  return names[static_cast<int>(op)];
}

double CollectiveLog::now() { return runtime::monotonic_seconds(); }

int64_t CollectiveLog::started(Op op, int64_t bytes, std::function<bool()> done) {
  std::lock_guard<std::mutex> lock(mu_);
  poll_locked();  // completed probes free their events even when no watchdog reads the log
  CollectiveRecord r;
  r.seq = ++next_;
  r.op = static_cast<int>(op);
  r.bytes = bytes;
  r.started_s = now();
  r.probed = static_cast<bool>(done);
  recent_.push_back(r);
  // Keep in-flight records even past `keep`: the watchdog must see the oldest unfinished one.
  while (recent_.size() > keep_ && recent_.front().finished_s >= 0) recent_.pop_front();
  if (done) probes_.emplace_back(r.seq, std::move(done));
  return r.seq;
}

CollectiveRecord* CollectiveLog::find_locked(int64_t seq) {
  // Records are consecutive by seq (appended at the back, dropped only from the front).
  if (recent_.empty() || seq < recent_.front().seq || seq > recent_.back().seq) return nullptr;
  return &recent_[static_cast<size_t>(seq - recent_.front().seq)];
}

void CollectiveLog::finished(int64_t seq) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto* r = find_locked(seq); r && r->finished_s < 0) r->finished_s = now();
}

void CollectiveLog::waiting(int64_t seq) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto* r = find_locked(seq); r && r->finished_s < 0) r->wait_started_s = now();
}

void CollectiveLog::add_wait(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  wait_s_ += seconds;
}

double CollectiveLog::wait_seconds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return wait_s_;
}

void CollectiveLog::poll_locked() {
  while (!probes_.empty() && probes_.front().second()) {  // in order: a stream completes in order
    if (auto* r = find_locked(probes_.front().first); r && r->finished_s < 0) r->finished_s = now();
    probes_.pop_front();
  }
}

CollectiveLog::State CollectiveLog::state() {
  std::lock_guard<std::mutex> lock(mu_);
  poll_locked();
  State s;
  s.started = next_;
  s.finished = next_;
  for (const auto& r : recent_)
    if (r.finished_s < 0) {
      s.finished = r.seq - 1;
      s.oldest_in_flight = r.seq;
      s.oldest_op = r.op;
      s.oldest_age_s = r.probed                ? now() - r.started_s
                       : r.wait_started_s >= 0 ? now() - r.wait_started_s
                                               : 0;
      break;
    }
  return s;
}

std::vector<CollectiveRecord> CollectiveLog::history() {
  std::lock_guard<std::mutex> lock(mu_);
  poll_locked();
  return {recent_.begin(), recent_.end()};
}

std::string describe(const CollectiveRecord& r, double now_s) {
  char buf[160];
  const double mib = static_cast<double>(r.bytes) / (1 << 20);
  if (r.finished_s >= 0)
    std::snprintf(buf, sizeof buf, "#%lld %s %.2f MiB, took %.4f s, ended %.1f s ago",
                  static_cast<long long>(r.seq), op_name(static_cast<Op>(r.op)), mib,
                  r.finished_s - r.started_s, now_s - r.finished_s);
  else
    std::snprintf(buf, sizeof buf, "#%lld %s %.2f MiB, IN FLIGHT for %.1f s",
                  static_cast<long long>(r.seq), op_name(static_cast<Op>(r.op)), mib,
                  now_s - r.started_s);
  return buf;
}

}  // namespace shardtrain::comm
