// The experiment trackers' run name (--run-name): given, else the checkpoint directory's name (a
// resume lands in the same run), else the UTC start time; one directory name or exit 2.
#include <gtest/gtest.h>

#include <regex>

#include "shardtrain/obs/config.h"
#include "shardtrain/runtime/error.h"

using namespace shardtrain;

namespace {
std::string resolved(const std::string& given, const std::string& checkpoint_dir) {
  obs::ObsConfig c;
  c.run_name = given;
  c.resolve_run_name(checkpoint_dir);
  return c.run_name;
}
}  // namespace

TEST(RunName, GivenThenCheckpointDirectoryThenStartTime) {
  EXPECT_EQ(resolved("lr3e-4", "runs/job1"), "lr3e-4");
  EXPECT_EQ(resolved("", "runs/job1"), "job1");
  EXPECT_EQ(resolved("", "runs/job1/"), "job1");
  EXPECT_EQ(resolved("", "/scratch/runs/../job2"), "job2");
  EXPECT_TRUE(std::regex_match(resolved("", ""), std::regex(R"(20\d{6}-\d{6})")))
      << resolved("", "");
}

TEST(RunName, APathIsRefusedNamingTheOption) {
  for (const char* bad : {"a/b", ".", ".."}) {
    try {
      resolved(bad, "");
      FAIL() << bad << " was accepted";
    } catch (const runtime::UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("--run-name"), std::string::npos) << e.what();
    }
  }
}
