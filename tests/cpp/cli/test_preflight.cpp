// shardtrain preflight: nccl-tests' bandwidth arithmetic, the libfabric probe against fi_info
// (libfabric's own tool), and real sweeps under mpirun with 2 simulated nodes.
#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <set>
#include <sstream>

#include "run_binary.h"
#include "shardtrain/cli/options.h"
#include "shardtrain/comm/bus_bandwidth.h"
#include "shardtrain/net/fabric_probe.h"
#include "shardtrain/runtime/error.h"

using namespace shardtrain;
using namespace testing_support;

TEST(BusBandwidth, FactorsMatchNcclTests) {
  EXPECT_DOUBLE_EQ(comm::bus_factor(comm::Op::kAllReduce, 8), 2.0 * 7 / 8);
  EXPECT_DOUBLE_EQ(comm::bus_factor(comm::Op::kAllGather, 8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(comm::bus_factor(comm::Op::kReduceScatter, 2), 0.5);
  EXPECT_DOUBLE_EQ(comm::bus_factor(comm::Op::kAllReduce, 1), 0.0);
  EXPECT_DOUBLE_EQ(comm::bus_factor(comm::Op::kBroadcast, 4), 1.0);
}

TEST(BusBandwidth, SweepSizesAreNcclTestsSteps) {
  const auto s = comm::sweep_sizes(1 << 20, 1 << 30, 2);
  ASSERT_EQ(s.size(), 11u);  // 1M, 2M, ... 1G
  EXPECT_EQ(s.front(), 1 << 20);
  EXPECT_EQ(s.back(), 1 << 30);
  EXPECT_EQ(comm::sweep_sizes(1 << 20, 100 << 20, 4),
            (std::vector<int64_t>{1 << 20, 4 << 20, 16 << 20, 64 << 20}));
  EXPECT_THROW(comm::sweep_sizes(0, 10, 2), runtime::UsageError);
  EXPECT_THROW(comm::sweep_sizes(1, 10, 1), runtime::UsageError);
  // Every rank's share is equal, and nobody gets zero elements.
  EXPECT_EQ(comm::sweep_elements(1 << 20, 4, 3), 262143);
  EXPECT_EQ(comm::sweep_elements(4, 4, 8), 8);
}

TEST(PreflightOptions, SizesAndValidation) {
  EXPECT_EQ(cli::parse_bytes("1M", "--min-bytes"), 1 << 20);
  EXPECT_EQ(cli::parse_bytes("2G", "--max-bytes"), int64_t{2} << 30);
  EXPECT_EQ(cli::parse_bytes("4096", "--max-bytes"), 4096);
  EXPECT_THROW(cli::parse_bytes("12X", "--max-bytes"), runtime::UsageError);
  EXPECT_THROW(cli::parse_preflight({"--ops", "broadcast"}, nullptr), runtime::UsageError);
  EXPECT_THROW(cli::parse_preflight({"--min-bytes", "4M", "--max-bytes", "1M"}, nullptr),
               runtime::UsageError);
  const auto o = cli::parse_preflight(
      {"--ops", "all_reduce", "--scopes", "inter", "--min-busbw", "2.5"}, nullptr);
  EXPECT_EQ(o.ops, std::vector<std::string>{"all_reduce"});
  EXPECT_FALSE(o.intra);
  EXPECT_TRUE(o.inter);
  EXPECT_DOUBLE_EQ(o.min_busbw, 2.5);
}

// Our fi_getinfo probe lists the providers that libfabric's own fi_info tool lists.
TEST(FabricProbe, ProvidersMatchFiInfo) {
  auto r = shell("fi_info -l");
  if (r.code == 127)
    GTEST_SKIP()
        << "fi_info (Debian's libfabric-bin) is not installed; scripts/install-deps.sh installs it";
  ASSERT_EQ(r.code, 0) << r.out;
  std::set<std::string> theirs;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line.back() == ':') theirs.insert(line.substr(0, line.size() - 1));
  const auto ours = net::probe_fabric();
  ASSERT_FALSE(ours.providers.empty());
  for (const auto& p : ours.providers)
    EXPECT_TRUE(theirs.count(p)) << p << " not in fi_info -l:\n" << r.out;
  EXPECT_TRUE(ours.has("tcp") || ours.has("shm")) << "the fallbacks should exist on any Linux host";
  // fi_info -p efa fails when there is no EFA device, as the probe reports.
  const bool efa = shell("fi_info -p efa -t FI_EP_RDM").code == 0;
  EXPECT_EQ(ours.efa_devices > 0, efa);
}

namespace {
const std::string kMpi = SHARDTRAIN_MPIEXEC;

struct SweepRow {
  double bytes, us, algbw, busbw;
  long wrong;
};

// The data rows printed under each "# <op>, <scope>: ..." header.
std::vector<std::pair<std::string, std::vector<SweepRow>>> parse_sweeps(const std::string& out) {
  std::vector<std::pair<std::string, std::vector<SweepRow>>> all;
  std::istringstream in(out);
  const std::regex header(R"(^# (\w+), ([\w-]+): (\d+) groups of (\d+) ranks.*)");
  const std::regex row(
      R"(^\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s+rank \d+ \(.*\)$)");
  std::smatch m;
  for (std::string line; std::getline(in, line);) {
    if (std::regex_match(line, m, header))
      all.push_back({m[1].str() + " " + m[2].str() + " n=" + m[4].str(), {}});
    else if (std::regex_match(line, m, row) && !all.empty())
      all.back().second.push_back(
          {std::stod(m[1]), std::stod(m[3]), std::stod(m[4]), std::stod(m[5]), std::stol(m[6])});
  }
  return all;
}
}  // namespace

TEST(Preflight, SweepsInsideAndAcrossSimulatedNodes) {
  auto r =
      run("preflight --ranks-per-node 2 --min-bytes 64K --max-bytes 1M --step-factor 4 --iters 2 "
          "--threads 1",
          kMpi + "4 ");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("4 ranks on 2 nodes x 2 ranks per node, cpu + MPI"), std::string::npos)
      << r.out;
  for (int rank = 0; rank < 4; ++rank)
    EXPECT_NE(r.out.find("rank " + std::to_string(rank) + "  node " + std::to_string(rank / 2)),
              std::string::npos)
        << r.out;
  EXPECT_NE(r.out.find("libfabric 1."), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("net plugin:"), std::string::npos) << r.out;
  const auto sweeps = parse_sweeps(r.out);
  ASSERT_EQ(sweeps.size(), 6u) << r.out;  // 3 collectives x (intra-node, inter-node)
  for (const auto& [name, rows] : sweeps) {
    ASSERT_EQ(rows.size(), 3u) << name;  // 64K, 256K, 1M
    const double factor =
        name.rfind("all_reduce", 0) == 0 ? 1.0 : 0.5;  // groups of 2: 2(n-1)/n, (n-1)/n
    for (const auto& row : rows) {
      EXPECT_EQ(row.wrong, 0) << name;
      EXPECT_GT(row.us, 0) << name;  // algbw is printed to 0.01 GB/s: 0.00 when a loaded machine
                                     // takes > 13 ms per 64 KiB
      // Each row is the slowest group's: algbw = size / time, busbw = algbw * (n-1)/n or 2(n-1)/n.
      EXPECT_NEAR(row.algbw, row.bytes / row.us / 1e3, 0.02 + 0.01 * row.algbw) << name;
      EXPECT_NEAR(row.busbw, row.algbw * factor, 0.011 + 0.01 * row.algbw) << name;
    }
  }
  EXPECT_NE(r.out.find("preflight: PASS"), std::string::npos) << r.out;
}

TEST(Preflight, FailsBelowMinBusbwAndNamesTheSweep) {
  auto r =
      run("preflight --ranks-per-node 1 --ops all_reduce --scopes inter --min-bytes 64K "
          "--max-bytes 64K "
          "--iters 1 --threads 1 --min-busbw 100000",
          kMpi + "2 ");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("preflight: FAIL: all_reduce inter-node: avg busbw"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("< --min-busbw 100000"), std::string::npos) << r.out;
}

TEST(Preflight, OneRankPerGroupIsSkippedWithAReason) {
  auto r = run("preflight --ranks-per-node 2 --scopes inter --max-bytes 1M --iters 1", kMpi + "2 ");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("# inter-node: skipped, groups of one rank (1 node x 2 ranks per node)"),
            std::string::npos)
      << r.out;
}

TEST(Preflight, BadOptionsExitTwo) {
  auto r = run("preflight --max-bytes 12X");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--max-bytes '12X' is not a size"), std::string::npos) << r.out;
  r = run("preflight --device tpu");
  EXPECT_EQ(r.code, 2) << r.out;
}
