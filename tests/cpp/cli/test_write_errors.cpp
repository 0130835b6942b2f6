// A full, read-only or forbidden disk under prepare, an export and report: exit 2, one line naming
// the path and what happened, and nothing partial left where a later run would take it (the
// writers fill PATH.tmp and rename it). Real tmpfs mounts, sized so the output fills them.
#include <gtest/gtest.h>

#include <cerrno>
#include <filesystem>
#include <fstream>

#include "one_line_errors.h"
#include "run_binary.h"
#include "shardtrain/runtime/atomic_write.h"

using namespace shardtrain;
using namespace testing_support;
namespace fs = std::filesystem;

namespace {
const std::string kDemo = std::string(SHARDTRAIN_TEST_TMP) + "/demo";

// A tmpfs of `size` (mount's syntax: 512k) at a fresh directory, unmounted at the end.
class Tmpfs {
 public:
  Tmpfs(const std::string& name, const std::string& size) : dir_(tmp(name)) {
    shell("umount " + dir_ + " 2>/dev/null");
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const Result r = shell("mount -t tmpfs -o size=" + size + " tmpfs " + dir_);
    mounted_ = r.code == 0;
    why_ = r.out;
  }
  ~Tmpfs() {
    if (mounted_) shell("umount " + dir_);
  }
  bool mounted() const { return mounted_; }
  const std::string& why() const { return why_; }
  const std::string& dir() const { return dir_; }
  bool read_only() { return shell("mount -o remount,ro " + dir_).code == 0; }
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_))
      names.push_back(e.path().filename().string());
    return names;
  }

 private:
  std::string dir_, why_;
  bool mounted_ = false;
};

#define MOUNT_OR_SKIP(t) \
  if (!(t).mounted())    \
  GTEST_SKIP() << "mount -t tmpfs is not permitted here (needs root): " << (t).why()

std::string prepare_args(const std::string& output) {
  return "prepare --tokenizer " + source("data/demo/tokenizer.model") + " --input " +
         source("data/demo/train.jsonl") + " --output " + output + " --seq-len 64 --mode padding";
}

std::string write_metrics(const std::string& name) {  // a short run's metrics, as train writes them
  const std::string path = tmp(name);
  std::ofstream out(path);
  for (int s = 1; s <= 20; ++s)
    out << "{\"step\": " << s << ", \"loss\": " << 3.0 - 0.1 * s
        << ", \"tokens_per_s\": " << 1000 + s << ", \"step_time_s\": 0.5}\n";
  return path;
}
}  // namespace

TEST(WriteErrors, EachStorageFailureHasItsOwnLine) {
  EXPECT_EQ(runtime::storage_failure_line("/o/t.h5", ENOSPC, 12 << 10),
            "cannot write /o/t.h5: no space left on device (it needs more than the 12.0 KiB free "
            "in /o), and no partial "
            "output was left; free "
            "space there or write elsewhere");
  EXPECT_EQ(runtime::storage_failure_line("/o/t.h5", EDQUOT, -1),
            "cannot write /o/t.h5: disk quota exceeded, and no partial output was left; free space "
            "within your quota "
            "(quota -s; lfs quota on Lustre) or write elsewhere");
  EXPECT_EQ(runtime::storage_failure_line("/o/t.h5", EROFS, -1),
            "cannot write /o/t.h5: read-only file system, and no partial output was left; write to "
            "a writable file "
            "system, or remount /o read-write");
  EXPECT_EQ(runtime::storage_failure_line("/o/t.h5", EACCES, -1),
            "cannot write /o/t.h5: permission denied, and no partial output was left; write to a "
            "directory this user "
            "can write, or fix the permissions of /o");
  // From the text of HDF5's file driver, of strerror, or from a directory that has no room left.
  EXPECT_EQ(runtime::storage_errno(
                "H5FD_sec2_write(): file write failed: errno = 122, error message = 'x'", 1 << 30),
            EDQUOT);
  EXPECT_EQ(runtime::storage_errno("cannot write a.tmp: No space left on device", 1 << 30), ENOSPC);
  EXPECT_EQ(runtime::storage_errno("H5Dwrite(): can't write data", 4096), ENOSPC);
  EXPECT_EQ(runtime::storage_errno("H5Dwrite(): can't write data", 1 << 30), 0);
  EXPECT_EQ(runtime::tmp_path("/o/t.h5"), "/o/t.h5.tmp");
  EXPECT_EQ(runtime::tmp_path("/o/export/"), "/o/export.tmp");
}

TEST(WriteErrors, PrepareOnAFullDiskIsOneLineAndLeavesNothing) {
  Tmpfs t("full_prepare", "512k");  // the demo's token file is about 2 MiB
  MOUNT_OR_SKIP(t);
  const std::string out = t.dir() + "/train.h5";
  const Result r = run(prepare_args(out));
  expect_one_line_exit2(r,
                        "shardtrain: error: cannot write " + out + ": no space left on device (");
  EXPECT_NE(r.out.find("free space there or write elsewhere"), std::string::npos) << r.out;
  EXPECT_TRUE(t.entries().empty()) << "no " << out << ", no .tmp: " << t.entries().front();
}

TEST(WriteErrors, PrepareKeepsTheEarlierFileWhenTheNewOneDoesNotFit) {
  Tmpfs t("full_prepare_keep", "512k");
  MOUNT_OR_SKIP(t);
  const std::string out = t.dir() + "/train.h5";
  std::ofstream(out) << "the earlier output";
  const Result r = run(prepare_args(out));
  expect_one_line_exit2(r, "cannot write " + out + ": no space left on device");
  EXPECT_EQ(slurp(out), "the earlier output");
  EXPECT_FALSE(fs::exists(out + ".tmp"));
}

TEST(WriteErrors, ExportOnAFullDiskLeavesNoDirectory) {
  Tmpfs t("full_export", "256k");  // the tiny model's weights are 620 KiB
  MOUNT_OR_SKIP(t);
  const std::string out = t.dir() + "/model";
  const Result r = run("train --model tiny --threads 1 --batch-size 4 --steps 1 --data " + kDemo +
                       "/train.h5 --save-model " + out);
  expect_one_line_exit2(r, "shardtrain: error: cannot write " + out + ": no space left on device (",
                        /*before_step1=*/false);
  EXPECT_TRUE(t.entries().empty()) << "no " << out << ", no model.tmp: " << t.entries().front();
}

TEST(WriteErrors, ReportOnAFullDiskIsOneLineAndLeavesNoPartialChart) {
  Tmpfs t("full_report", "8k");
  MOUNT_OR_SKIP(t);
  const Result r = run("report " + write_metrics("full_report.jsonl") + " --out-dir " + t.dir());
  expect_one_line_exit2(
      r, "shardtrain: error: cannot write " + t.dir() + "/loss.png: no space left on device (");
  EXPECT_TRUE(t.entries().empty()) << t.entries().front();
}

TEST(WriteErrors, AReadOnlyFileSystemIsItsOwnLine) {
  Tmpfs t("ro_report", "1m");
  MOUNT_OR_SKIP(t);
  ASSERT_TRUE(t.read_only());
  const Result r = run("report " + write_metrics("ro_report.jsonl") + " --out-dir " + t.dir());
  expect_one_line_exit2(
      r, "shardtrain: error: cannot write " + t.dir() +
             "/loss.png: read-only file system, and no "
             "partial output was left; write to a writable file system, or remount " +
             t.dir() + " read-write");
  const Result e = run("train --model tiny --threads 1 --batch-size 4 --steps 1 --data " + kDemo +
                       "/train.h5 --save-model " + t.dir() + "/model");
  expect_one_line_exit2(e, "--save-model " + t.dir() + "/model: cannot create files in " + t.dir() +
                               ": Read-only file system");
}
