#include "shardtrain/ckpt/dir_lock.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/logging.h"

namespace fs = std::filesystem;

namespace shardtrain::ckpt {
namespace {

constexpr size_t kRecordBytes = 256;  // fixed: a heartbeat rewrites it in place with one pwrite

int64_t now_s() { return static_cast<int64_t>(std::time(nullptr)); }

std::string this_host() {
  char buf[256] = {0};
  return ::gethostname(buf, sizeof buf - 1) == 0 ? buf : "unknown";
}

std::string utc(int64_t t) {
  const std::time_t tt = static_cast<std::time_t>(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

bool pwrite_record(int fd, const LockHolder& h) {
  std::string line = format_lock_record(h);
  line.resize(kRecordBytes - 1, ' ');
  line += '\n';
  return ::pwrite(fd, line.data(), line.size(), 0) == static_cast<ssize_t>(line.size());
}

bool pid_alive(int64_t pid) {
  return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
}

}  // namespace

std::string format_lock_record(const LockHolder& h) {
  return "host=" + h.host + " job=" + h.job + " pid=" + std::to_string(h.pid) +
         " since=" + std::to_string(h.since) + " heartbeat=" + std::to_string(h.heartbeat);
}

bool parse_lock_record(const std::string& text, LockHolder* out) {
  std::istringstream in(text);
  LockHolder h;
  std::string item;
  try {
    while (in >> item) {
      const size_t eq = item.find('=');
      if (eq == std::string::npos) return false;
      const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
      if (key == "host")
        h.host = value;
      else if (key == "job")
        h.job = value;
      else if (key == "pid")
        h.pid = std::stoll(value);
      else if (key == "since")
        h.since = std::stoll(value);
      else if (key == "heartbeat")
        h.heartbeat = std::stoll(value);
    }
  } catch (const std::exception&) {  // stoll: not a number
    return false;
  }
  if (h.host.empty() || h.pid <= 0) return false;
  *out = h;
  return true;
}

std::string describe_holder(const LockHolder& h) {
  return "host " + h.host + ", " +
         (h.job == "none" || h.job.empty() ? "no Slurm job" : "Slurm job " + h.job) + ", pid " +
         std::to_string(h.pid) + ", since " + utc(h.since);
}

LockVerdict judge_lock(bool flock_supported, bool flock_ok, const LockHolder* record,
                       const std::string& my_host, int64_t now, bool record_pid_alive) {
  if (flock_supported) {  // the kernel (or Lustre's flock mount) knows: a record without a flock is
                          // left over
    if (!flock_ok) return LockVerdict::kHeld;
    return record ? LockVerdict::kTakeOver : LockVerdict::kFree;
  }
  if (!record) return LockVerdict::kFree;
  if (record->host == my_host)
    return record_pid_alive ? LockVerdict::kHeld : LockVerdict::kTakeOver;
  return now - record->heartbeat < kLockStaleSeconds ? LockVerdict::kHeld : LockVerdict::kTakeOver;
}

struct DirLock::State {
  int fd = -1;
  std::string dir, path;
  bool made_dir =
      false;  // this run created dir: removed again if the lock is all it holds at the end
  LockHolder me;
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  std::thread heartbeat;
};

namespace {

// Rank 0's part: the lock's state, or nullptr with *failure set. *warning: a takeover to report.
std::unique_ptr<DirLock::State> take(const std::string& dir, std::string* failure,
                                     std::string* warning);

}  // namespace

DirLock::DirLock() = default;
DirLock::DirLock(std::unique_ptr<State> s) : state_(std::move(s)) {}
DirLock::DirLock(DirLock&& o) noexcept : state_(std::move(o.state_)) {}
DirLock& DirLock::operator=(DirLock&& o) noexcept {
  if (this != &o) {
    release();
    state_ = std::move(o.state_);
  }
  return *this;
}
DirLock::~DirLock() { release(); }

void DirLock::release() {
  if (!state_) return;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stop = true;
  }
  state_->cv.notify_all();
  if (state_->heartbeat.joinable()) state_->heartbeat.join();
  if (::ftruncate(state_->fd, 0) != 0) {
  }                        // no record: released (a later job then finds it free)
  ::close(state_->fd);     // drops the flock
  if (state_->made_dir) {  // a run that failed before it wrote anything leaves no directory behind
    std::error_code ec;
    bool only_lock = true;
    for (const auto& e : fs::directory_iterator(state_->dir, ec))
      only_lock = only_lock && e.path().filename() == kLockFileName;
    if (!ec && only_lock && fs::remove(state_->path, ec)) fs::remove(state_->dir, ec);
  }
  state_.reset();
}

DirLock DirLock::acquire(MPI_Comm comm, const std::string& dir) {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  std::string failure, warning;
  std::unique_ptr<State> state;
  if (rank == 0) {
    try {
      state = take(dir, &failure, &warning);
    } catch (const std::exception& e) {
      failure = "--checkpoint-dir " + dir + ": cannot take its lock file (" + e.what() +
                "); choose a directory this job can write";
    }
  }
  int len = static_cast<int>(failure.size());
  MPI_CHECK(MPI_Bcast(&len, 1, MPI_INT, 0, comm));
  failure.resize(static_cast<size_t>(len));
  MPI_CHECK(MPI_Bcast(failure.data(), len, MPI_CHAR, 0, comm));
  if (!failure.empty()) throw runtime::AgreedUsageError(failure);
  if (!warning.empty()) runtime::log::warn_once(warning);
  if (state) {  // the heartbeat keeps the record fresh for file systems without flock
    State* s = state.get();
    s->heartbeat = std::thread([s] {
      std::unique_lock<std::mutex> lock(s->mu);
      while (!s->cv.wait_for(lock, std::chrono::seconds(kLockHeartbeatSeconds),
                             [s] { return s->stop; })) {
        s->me.heartbeat = now_s();
        pwrite_record(s->fd, s->me);  // a failed write only ages the record; training goes on
      }
    });
  }
  return DirLock(std::move(state));
}

namespace {

std::unique_ptr<DirLock::State> take(const std::string& dir, std::string* failure,
                                     std::string* warning) {
  const std::string name = "--checkpoint-dir " + dir;
  std::error_code ec;
  const bool made_dir = fs::create_directories(dir, ec);
  const std::string path = (fs::path(dir) / kLockFileName).string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    *failure = name + ": cannot open its lock file " + path + " (" + std::strerror(errno) +
               "); choose a directory this job can write";
    return nullptr;
  }
  bool supported = true, ok = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
  if (!ok && errno != EWOULDBLOCK)
    supported = false;  // ENOLCK, EOPNOTSUPP, ENOSYS: no flock on this mount
  std::vector<char> buf(4096);
  const ssize_t n = ::pread(fd, buf.data(), buf.size(), 0);
  LockHolder old;
  const bool has_record =
      n > 0 && parse_lock_record(std::string(buf.data(), static_cast<size_t>(n)), &old);
  const std::string host = this_host();
  const int64_t now = now_s();
  const bool alive = has_record && old.host == host && pid_alive(old.pid);
  const std::string heartbeat =
      has_record && !supported
          ? ", last heartbeat " + std::to_string(now - old.heartbeat) + " s ago"
          : "";
  switch (judge_lock(supported, ok, has_record ? &old : nullptr, host, now, alive)) {
    case LockVerdict::kHeld:
      ::close(fd);
      *failure = name + " is in use by another job (" +
                 (has_record ? describe_holder(old) + heartbeat
                             : "holder unknown: " + path + " holds no record") +
                 "); wait for that job to end or cancel it, or pass another --checkpoint-dir (the "
                 "lock is " +
                 path + ")";
      return nullptr;
    case LockVerdict::kTakeOver:
      *warning = name + ": taking over the lock of a job that is gone (" + describe_holder(old) +
                 heartbeat + ")";
      break;
    case LockVerdict::kFree:
      break;
  }
  auto s = std::make_unique<DirLock::State>();
  s->fd = fd;
  s->dir = dir;
  s->path = path;
  s->made_dir = made_dir;
  s->me.host = host;
  const char* job = std::getenv("SLURM_JOB_ID");
  s->me.job = job && *job ? job : "none";
  s->me.pid = static_cast<int64_t>(::getpid());
  s->me.heartbeat = now;
  s->me.since = s->me.heartbeat;
  if (::ftruncate(fd, 0) != 0 || !pwrite_record(fd, s->me)) {
    ::close(fd);
    *failure = name + ": cannot write its lock file " + path + " (" + std::strerror(errno) +
               "); choose a directory this job can write";
    return nullptr;
  }
  return s;
}

}  // namespace

}  // namespace shardtrain::ckpt
