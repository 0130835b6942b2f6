// One writer per checkpoint directory: rank 0 of a train job holds DIR/.shardtrain.lock for the
// run's life, so a requeued job whose old allocation still drains, or a second user with the same
// path, stops with one line (exit 2) instead of interleaving saves with the first.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>

namespace shardtrain::ckpt {

constexpr const char* kLockFileName = ".shardtrain.lock";
constexpr int64_t kLockHeartbeatSeconds = 30;  // how often the holder rewrites its record
constexpr int64_t kLockStaleSeconds = 300;     // without flock: an older heartbeat is a dead job's

// The record in the lock file: who holds it, refreshed by the holder's heartbeat.
struct LockHolder {
  std::string host;
  std::string job = "none";  // SLURM_JOB_ID
  int64_t pid = 0;
  int64_t since = 0;      // unix seconds
  int64_t heartbeat = 0;  // unix seconds
};

std::string format_lock_record(const LockHolder& h);  // one line, key=value
bool parse_lock_record(const std::string& text,
                       LockHolder* out);  // false: empty (released) or not a record
// "host H, Slurm job J, pid P, since 2026-11-26 22:30:00 UTC"
std::string describe_holder(const LockHolder& h);

enum class LockVerdict { kFree, kTakeOver, kHeld };
// Pure. flock decides where the file system has it (flock_ok: this process got it; a record left
// behind is then a dead job's). Without flock the record decides: a holder on this host is alive
// while its pid is, one on another host while its heartbeat is younger than kLockStaleSeconds.
LockVerdict judge_lock(bool flock_supported, bool flock_ok, const LockHolder* record,
                       const std::string& my_host, int64_t now, bool record_pid_alive);

// Held by rank 0 for the object's life; the other ranks hold nothing. Move-only.
class DirLock {
 public:
  DirLock();  // holds nothing (no --checkpoint-dir, and ranks other than 0)
  // Collective over comm: rank 0 decides and every rank learns it, so none is left waiting. A
  // lock held by a live job throws runtime::AgreedUsageError on every rank, naming the directory
  // and the holder; a dead job's lock is taken over with a one-line warning naming it.
  static DirLock acquire(MPI_Comm comm, const std::string& dir);
  DirLock(DirLock&&) noexcept;
  DirLock& operator=(DirLock&&) noexcept;
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  ~DirLock();  // clears the record and closes the file, which drops the flock

  bool held() const { return state_ != nullptr; }

  struct State;  // rank 0's open lock file and heartbeat thread (src/ckpt/dir_lock.cpp)

 private:
  explicit DirLock(std::unique_ptr<State> s);
  void release();
  std::unique_ptr<State> state_;
};

}  // namespace shardtrain::ckpt
