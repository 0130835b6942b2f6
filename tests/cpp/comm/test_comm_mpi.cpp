// The MPI communicator under mpirun: every collective's result, bf16 moved bit-exact and summed
// in fp32 with one rounding, async handles completed in any order, and the byte accounting.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include "shardtrain/comm/mpi_communicator.h"
#include "shardtrain/runtime/error.h"

using namespace shardtrain;
using namespace shardtrain::comm;

namespace {
std::unique_ptr<MpiCommunicator> g_world;
int R() { return g_world->rank(); }
int W() { return g_world->size(); }
}  // namespace

TEST(CommMpi, AllGatherPlacesEachRankContiguously) {
  for (auto dtype : {at::kFloat, at::kBFloat16, at::kLong}) {
    auto in =
        at::arange(5, at::kDouble).add(100.0 * R() + 0.0078125).to(dtype);  // bf16-exact values
    auto out = at::empty({5 * W()}, dtype);
    g_world->all_gather(in, out);
    for (int r = 0; r < W(); ++r)
      EXPECT_TRUE(out.narrow(0, 5 * r, 5)
                      .equal(at::arange(5, at::kDouble).add(100.0 * r + 0.0078125).to(dtype)))
          << c10::toString(dtype) << " rank " << r;
  }
}

TEST(CommMpi, ReduceScatterSumsEachSlice) {
  const int n = 3;
  auto in = at::arange(n * W(), at::kFloat).mul(R() + 1);  // rank r sends (r + 1) * i
  auto out = at::empty({n}, at::kFloat);
  g_world->reduce_scatter(in, out);
  const float ranks_sum = W() * (W() + 1) / 2.0f;
  EXPECT_TRUE(out.equal(at::arange(n * R(), n * (R() + 1), at::kFloat).mul(ranks_sum)));
}

TEST(CommMpi, Bf16SumsAccumulateInFp32AndRoundOnce) {
  // 0.1 is inexact in bf16; W copies summed in fp32 then rounded is the NCCL-style answer.
  auto t = at::full({7}, 0.1, at::kBFloat16);
  const auto expect = at::full({7}, 0.1, at::kBFloat16).to(at::kFloat).mul(W()).to(at::kBFloat16);
  g_world->all_reduce(t);
  EXPECT_TRUE(t.equal(expect)) << t << expect;
  auto rs_in = at::full({2 * W()}, 0.1, at::kBFloat16), rs_out = at::empty({2}, at::kBFloat16);
  g_world->reduce_scatter(rs_in, rs_out);
  EXPECT_TRUE(rs_out.equal(expect.narrow(0, 0, 2)));
}

TEST(CommMpi, AsyncHandlesCompleteInAnyOrder) {
  auto a = at::full({1000}, static_cast<double>(R()), at::kFloat);
  auto b = at::full({4}, 1.0, at::kDouble);
  auto g_in = at::full({2}, static_cast<float>(R()), at::kFloat),
       g_out = at::empty({2 * W()}, at::kFloat);
  auto wa = g_world->all_reduce_async(a);
  auto wb = g_world->all_reduce_async(b);
  auto wg = g_world->all_gather_async(g_in, g_out);
  wg->wait(), wb->wait(), wa->wait();
  EXPECT_EQ(a[999].item<float>(), W() * (W() - 1) / 2.0f);
  EXPECT_EQ(b[0].item<double>(), W());
  EXPECT_EQ(g_out[2 * (W() - 1)].item<float>(), W() - 1.0f);
}

TEST(CommMpi, BroadcastBarrierAndAccounting) {
  g_world->reset_stats();
  auto t = at::full({6}, static_cast<float>(R() + 7), at::kFloat);
  g_world->broadcast(t, W() - 1);
  EXPECT_TRUE(t.equal(at::full({6}, static_cast<float>(W() + 6), at::kFloat)));
  g_world->barrier();
  auto in = at::zeros({10}, at::kBFloat16), out = at::empty({10 * W()}, at::kBFloat16);
  g_world->all_gather(in, out);
  EXPECT_DOUBLE_EQ(g_world->all_reduce_sum(1.5), 1.5 * W());
  const auto& s = g_world->stats();
  EXPECT_EQ(s[Op::kBroadcast].bytes, 24);
  EXPECT_EQ(s[Op::kBarrier].calls, 1);
  EXPECT_EQ(s[Op::kAllGather].bytes, 2 * 10 * W());  // the gathered buffer, in bf16
  EXPECT_EQ(s[Op::kAllReduce].calls, 1);
  EXPECT_EQ(s[Op::kAllReduce].bytes, 8);
}

TEST(CommMpi, MismatchedBuffersAreErrorsNotCorruption) {
  auto in = at::zeros({4}, at::kFloat), out = at::empty({4 * W() + 1}, at::kFloat);
  EXPECT_THROW(g_world->all_gather(in, out), runtime::Error);
  EXPECT_THROW(g_world->reduce_scatter(out, in), runtime::Error);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  g_world = mpi_world();
  const int rc = RUN_ALL_TESTS();
  g_world.reset();
  int worst = rc;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
