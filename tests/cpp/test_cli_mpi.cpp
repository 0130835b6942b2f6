// `shardtrain train` under mpirun, as users launch it: N ranks train the same model as 1 rank,
// bad layouts fail on every rank with exit 2, and one rank's failure ends the whole job fast.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>

#include "run_binary.h"

using namespace testing_support;

namespace {
const std::string kDemo = std::string(SHARDTRAIN_TEST_TMP) + "/demo";
const std::string kTrain = "train --model tiny --threads 1 --data " + kDemo + "/train.h5 ";

std::string mpirun(int np) { return std::string(SHARDTRAIN_MPIEXEC) + std::to_string(np) + " "; }

}  // namespace

// The same global batch (8 rows x 2 micro-steps) on 1 rank and on 4 ranks as 2 nodes x 2.
TEST(CliMpi, FourRanksHybridTrainLikeOneRank) {
  const auto one = tmp("mpi_one.jsonl"), four = tmp("mpi_four.jsonl");
  auto a = run(kTrain + "--steps 15 --batch-size 8 --grad-accum 2 --metrics-file " + one, mpirun(1));
  ASSERT_EQ(a.code, 0) << a.out;
  auto b = run(kTrain + "--steps 15 --batch-size 2 --grad-accum 2 --sharding hybrid_shard --ranks-per-node 2 "
               "--activation-checkpointing --metrics-file " + four, mpirun(4));
  ASSERT_EQ(b.code, 0) << b.out;
  EXPECT_NE(b.out.find("hybrid_shard on 4 ranks (2 nodes x 2), shard groups of 2, replicas 2"), std::string::npos) << b.out;
  const auto ra = read_jsonl(one), rb = read_jsonl(four);
  ASSERT_EQ(ra.size(), 15u);
  ASSERT_EQ(rb.size(), 15u);
  for (size_t i = 0; i < ra.size(); ++i) {
    const double la = ra[i]["loss"], lb = rb[i]["loss"];
    EXPECT_NEAR(la, lb, 1e-5 * la) << "step " << i + 1;
    EXPECT_EQ(ra[i]["tokens"], rb[i]["tokens"]);
  }
  // Hybrid: gathers and reduce-scatters inside the shard group, the shard all-reduced across replicas.
  const auto& comm = rb.back()["comm"];
  EXPECT_GT(comm["shard"]["all_gather"]["bytes"].get<int64_t>(), 0);
  EXPECT_GT(comm["replicate"]["all_reduce"]["bytes"].get<int64_t>(), 0);
  EXPECT_FALSE(comm["replicate"].contains("all_gather"));
  const auto& mem = rb.back()["memory"];
  EXPECT_LT(mem["persistent_bytes"].get<int64_t>(), mem["unsharded_bytes"].get<int64_t>() / 2 + 4096);
}

TEST(CliMpi, LayoutsThatDoNotDivideExit2OnEveryRank) {
  auto r = run(kTrain + "--steps 2 --sharding hybrid_shard --shard-group-size 2", mpirun(3));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--shard-group-size 2 does not divide the 3 ranks"), std::string::npos) << r.out;
  auto k = run(kTrain + "--steps 2 --ranks-per-node 2", mpirun(3));
  EXPECT_EQ(k.code, 2) << k.out;
  EXPECT_NE(k.out.find("--ranks-per-node"), std::string::npos) << k.out;
  auto s = run(kTrain + "--steps 2 --sharding zero3", mpirun(2));
  EXPECT_EQ(s.code, 2);
  EXPECT_NE(s.out.find("--sharding"), std::string::npos) << s.out;
}

// Rank 1 throws after setup while rank 0 goes on into its first collective: the job must end
// with rank 1's message, not hang in rank 0's all-gather.
TEST(CliMpi, OneFailingRankEndsTheJobWithItsMessage) {
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run(kTrain + "--steps 50 --fail-on-rank 1", "timeout 60 " + mpirun(2));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.code, 124) << "timed out: a rank hung\n" << r.out;
  EXPECT_NE(r.out.find("fault injected by --fail-on-rank 1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank 1"), std::string::npos) << r.out;
  EXPECT_LT(secs, 20.0);
}
