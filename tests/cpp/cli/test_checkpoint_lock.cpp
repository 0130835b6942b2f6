// One writer per checkpoint directory: a second real `train` job on the same --checkpoint-dir
// exits 2 naming the first (host, job, pid, since when), a lock left by a dead job is taken over
// with one warning naming it, and once the first job ends a new one takes the directory.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>

#include "one_line_errors.h"
#include "run_binary.h"
#include "shardtrain/ckpt/dir_lock.h"

using namespace shardtrain;
using namespace testing_support;
namespace fs = std::filesystem;

extern char** environ;

namespace {
const std::string kData = std::string(SHARDTRAIN_TEST_TMP) + "/demo/train.h5";
const std::string kTrain = "train --model tiny --threads 1 --batch-size 4 --data " + kData + " ";
std::string mpirun(int np) { return std::string(SHARDTRAIN_MPIEXEC) + std::to_string(np) + " "; }

std::string hostname() {
  char buf[256] = {0};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

// A shell command in the background, as our own child: waited for, never left behind.
class Background {
 public:
  explicit Background(const std::string& cmd) {
    const char* argv[] = {"/bin/sh", "-c", cmd.c_str(), nullptr};
    if (posix_spawn(&pid_, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ) != 0)
      pid_ = -1;
  }
  ~Background() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      wait();
    }
  }
  pid_t pid() const { return pid_; }
  int wait() {  // the exit code
    int status = 0;
    if (pid_ > 0) waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  pid_t pid_ = -1;
};

// The holder's record, once it has one (polled up to `seconds`).
bool wait_for_record(const std::string& lock_file, ckpt::LockHolder* h, double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until) {
    if (ckpt::parse_lock_record(slurp(lock_file), h)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}
}  // namespace

TEST(CheckpointLock, RecordRoundTripsAndNamesTheHolder) {
  ckpt::LockHolder h;
  h.host = "node-7";
  h.job = "4242";
  h.pid = 31337;
  h.since = 1764196200;  // 2025-11-26 22:30:00 UTC
  h.heartbeat = 1764196230;
  ckpt::LockHolder back;
  ASSERT_TRUE(ckpt::parse_lock_record(ckpt::format_lock_record(h) + "          \n", &back));
  EXPECT_EQ(back.host, "node-7");
  EXPECT_EQ(back.job, "4242");
  EXPECT_EQ(back.pid, 31337);
  EXPECT_EQ(back.heartbeat, 1764196230);
  EXPECT_EQ(ckpt::describe_holder(h),
            "host node-7, Slurm job 4242, pid 31337, since 2025-11-26 22:30:00 UTC");
  h.job = "none";
  EXPECT_EQ(ckpt::describe_holder(h),
            "host node-7, no Slurm job, pid 31337, since 2025-11-26 22:30:00 UTC");
  EXPECT_FALSE(ckpt::parse_lock_record("", &back));  // released
  EXPECT_FALSE(ckpt::parse_lock_record("host=x pid=abc", &back));
}

TEST(CheckpointLock, VerdictWithAndWithoutFlock) {
  using V = ckpt::LockVerdict;
  ckpt::LockHolder mine{"here", "1", 10, 1000, 1000}, other{"there", "2", 20, 1000, 1000};
  const int64_t fresh = 1000 + ckpt::kLockStaleSeconds - 1, stale = 1000 + ckpt::kLockStaleSeconds;
  // flock decides where the file system has it.
  EXPECT_EQ(ckpt::judge_lock(true, false, nullptr, "here", fresh, false), V::kHeld);
  EXPECT_EQ(ckpt::judge_lock(true, true, nullptr, "here", fresh, false), V::kFree);
  EXPECT_EQ(ckpt::judge_lock(true, true, &other, "here", fresh, false),
            V::kTakeOver);  // left over: no flock behind it
  // Without flock: this host's holder lives while its pid does; another host's while it beats.
  EXPECT_EQ(ckpt::judge_lock(false, false, nullptr, "here", fresh, false), V::kFree);
  EXPECT_EQ(ckpt::judge_lock(false, false, &mine, "here", fresh, true), V::kHeld);
  EXPECT_EQ(ckpt::judge_lock(false, false, &mine, "here", fresh, false), V::kTakeOver);
  EXPECT_EQ(ckpt::judge_lock(false, false, &other, "here", fresh, false), V::kHeld);
  EXPECT_EQ(ckpt::judge_lock(false, false, &other, "here", stale, false), V::kTakeOver);
}

// Job A (2 ranks) trains; job B (2 ranks, --resume auto) on the same directory exits 2 on every
// rank with one line naming A; after A ends (SIGTERM: checkpoint, 75) job C takes the directory.
TEST(CheckpointLock, ASecondJobOnTheSameDirectoryExits2NamingTheHolder) {
  const std::string dir = tmp("ckpt_lock_busy"), lock = dir + "/" + ckpt::kLockFileName;
  fs::remove_all(dir);
  const std::string log_a = tmp("ckpt_lock_busy_a.log");
  // exec: the child is mpirun itself. It passes one SIGTERM on after odls_base_sigkill_timeout (3
  // s: the tiny model saves in 0.3 s).
  Background a("OMPI_MCA_odls_base_sigkill_timeout=3 exec " + mpirun(2) + SHARDTRAIN_BIN + " " +
               kTrain + "--steps 100000 --log-every 100000 --checkpoint-dir " + dir +
               " --resume auto > " + log_a + " 2>&1");
  ckpt::LockHolder holder;
  ASSERT_TRUE(wait_for_record(lock, &holder, 120)) << slurp(log_a);
  EXPECT_EQ(holder.host, hostname());
  const Result b = run(kTrain + "--steps 5 --checkpoint-dir " + dir + " --resume auto", mpirun(2));
  EXPECT_EQ(b.code, 2) << b.out;
  EXPECT_EQ(count(b.out, "shardtrain: error: "), 1u) << b.out;
  const std::string line = "shardtrain: error: --checkpoint-dir " + dir +
                           " is in use by another job (" + ckpt::describe_holder(holder) +
                           "); wait for that job to end or cancel it, or pass another "
                           "--checkpoint-dir (the lock is " +
                           lock + ")";
  EXPECT_NE(b.out.find(line), std::string::npos) << b.out;
  EXPECT_EQ(b.out.find("step 1/"), std::string::npos) << b.out;
  EXPECT_EQ(b.out.find("fatal"), std::string::npos) << b.out;
  // A is untouched by B: still the holder, still training.
  ckpt::LockHolder still;
  ASSERT_TRUE(ckpt::parse_lock_record(slurp(lock), &still));
  EXPECT_EQ(still.pid, holder.pid);
  ASSERT_EQ(kill(a.pid(), 0), 0) << slurp(log_a);
  // A ends: SIGTERM to mpirun reaches every rank, which checkpoint and exit 75; the record is
  // cleared.
  kill(a.pid(), SIGTERM);
  const int a_code = a.wait();  // mpirun's own code after a SIGTERM is 1; its ranks' is 75
  EXPECT_NE(a_code, 128 + SIGKILL) << slurp(log_a);
  EXPECT_NE(slurp(log_a).find("stopped by SIGTERM after a checkpoint; exiting with code 75"),
            std::string::npos)
      << slurp(log_a);
  EXPECT_FALSE(ckpt::parse_lock_record(slurp(lock), &still)) << "released: " << slurp(lock);
  // A new job takes the directory: no warning, since A let go of it.
  const Result c =
      run(kTrain + "--steps 1 --checkpoint-dir " + dir + " --overwrite-checkpoints", mpirun(2));
  EXPECT_EQ(c.code, 0) << c.out;
  EXPECT_EQ(c.out.find("taking over"), std::string::npos) << c.out;
}

// A kill -9, a node loss: the record stays behind without its flock (and, here, without its pid).
TEST(CheckpointLock, ALockLeftByADeadJobIsTakenOverWithOneWarning) {
  const std::string dir = tmp("ckpt_lock_dead"), lock = dir + "/" + ckpt::kLockFileName;
  fs::remove_all(dir);
  fs::create_directories(dir);
  Background gone("true");
  ckpt::LockHolder dead;
  dead.host = hostname();
  dead.job = "4242";
  dead.pid = gone.pid();
  gone.wait();
  dead.since = static_cast<int64_t>(std::time(nullptr)) - 3600;
  dead.heartbeat = dead.since + 60;
  std::ofstream(lock) << ckpt::format_lock_record(dead) << "\n";
  const Result r = run(kTrain + "--steps 1 --checkpoint-dir " + dir, mpirun(2));
  EXPECT_EQ(r.code, 0) << r.out;
  const std::string warning = "--checkpoint-dir " + dir +
                              ": taking over the lock of a job that is gone (" +
                              ckpt::describe_holder(dead) + ")";
  EXPECT_EQ(count(r.out, warning), 1u) << r.out;
  ckpt::LockHolder after;
  EXPECT_FALSE(ckpt::parse_lock_record(slurp(lock), &after))
      << "released at the end: " << slurp(lock);
  EXPECT_TRUE(fs::exists(dir + "/latest")) << r.out;
}
