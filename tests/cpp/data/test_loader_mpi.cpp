// The data loader under mpirun (1, 2 and 3 ranks): each rank reads its own rows, the global
// batches equal a single-rank loader's, an epoch covers the data once, and resume is exact; a
// preference file's pairs stay together in every micro-batch.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <filesystem>

#include "shardtrain/data/loader.h"
#include "shardtrain/runtime/error.h"
#include "test_paths.h"

using namespace shardtrain;

namespace {
constexpr int64_t kRows = 50, kSeq = 8, kGlobal = 6;
int g_rank = 0, g_world = 1;
std::string g_path;

// Row r holds token 3 + r everywhere, so a batch's content names its rows.
void write_fixture() {
  data::Rows rows;
  rows.rows = kRows;
  rows.seq_len = kSeq;
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t c = 0; c < kSeq; ++c)
      rows.tokens_data.push_back(static_cast<int32_t>(3 + r)), rows.mask_data.push_back(c > 0);
  data::write_token_file(g_path, rows, data::TokenFileMeta{});
}

data::LoaderConfig config(int rank, int world, bool prefetch = true) {
  data::LoaderConfig c;
  c.grad_accum = world == 1 ? 2 : 1;  // the same global batch of 6 at every world size
  c.micro_batch = kGlobal / (world * c.grad_accum);
  c.rank = rank;
  c.world = world;
  c.seed = 11;
  c.prefetch = prefetch;
  return c;
}

std::vector<int64_t> rows_from_content(const data::StepData& d) {
  std::vector<int64_t> rows;
  for (const auto& mb : d.micro)
    for (int64_t i = 0; i < mb.tokens.size(0); ++i)
      rows.push_back(mb.tokens[i][0].item<int64_t>() - 3);
  return rows;
}

std::vector<int64_t> allgather(const std::vector<int64_t>& mine) {
  int n = static_cast<int>(mine.size());
  std::vector<int> counts(g_world), displs(g_world);
  MPI_Allgather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD);
  for (int i = 1; i < g_world; ++i) displs[i] = displs[i - 1] + counts[i - 1];
  std::vector<int64_t> all(displs.back() + counts.back());
  MPI_Allgatherv(mine.data(), n, MPI_INT64_T, all.data(), counts.data(), displs.data(), MPI_INT64_T,
                 MPI_COMM_WORLD);
  return all;
}
}  // namespace

TEST(LoaderMpi, AnEpochCoversEveryRowExactlyOnce) {
  data::TokenFile f(g_path);
  data::DataLoader dl(f, config(g_rank, g_world));
  ASSERT_EQ(dl.global_batch(), kGlobal);
  ASSERT_EQ(dl.steps_per_epoch(), 9);  // 8 full batches and one of 2
  std::vector<int64_t> mine;
  for (int64_t s = 0; s < dl.steps_per_epoch(); ++s) {
    const auto d = dl.next();
    EXPECT_EQ(d.position.epoch, 0);
    const auto rows = rows_from_content(d);
    EXPECT_EQ(rows, d.rows) << "the content read is the rows asked for";
    for (const auto& mb : d.micro)  // labels: the masked first column is -100, the rest the token
      if (mb.tokens.size(0)) {
        EXPECT_TRUE(mb.labels.select(1, 0).eq(-100).all().item<bool>());
      }
    mine.insert(mine.end(), rows.begin(), rows.end());
  }
  EXPECT_EQ(dl.state(), (data::LoaderState{1, 0}));
  auto all = allgather(mine);
  std::sort(all.begin(), all.end());
  ASSERT_EQ(all.size(), static_cast<size_t>(kRows)) << "no row dropped or read twice";
  for (int64_t i = 0; i < kRows; ++i) EXPECT_EQ(all[i], i);
}

TEST(LoaderMpi, GlobalBatchesEqualTheSingleRankSequence) {
  data::TokenFile f(g_path);
  data::DataLoader dl(f, config(g_rank, g_world));
  data::DataLoader single(f, config(0, 1, /*prefetch=*/false));
  for (int64_t s = 0; s < 2 * dl.steps_per_epoch() + 3; ++s) {  // across two epoch boundaries
    const auto global = allgather(rows_from_content(dl.next()));
    const auto one = single.next();
    EXPECT_EQ(global, rows_from_content(one)) << "step " << s << " at world size " << g_world;
    EXPECT_EQ(global, one.rows);
  }
}

TEST(LoaderMpi, ARestoredPositionContinuesTheExactSequence) {
  data::TokenFile f(g_path);
  data::DataLoader a(f, config(g_rank, g_world));
  for (int i = 0; i < 5; ++i) a.next();
  const data::LoaderState saved = a.state();
  EXPECT_EQ(saved, (data::LoaderState{0, 5 * kGlobal})) << "positions are rows of the epoch";
  std::vector<std::vector<int64_t>> expected;
  for (int i = 0; i < 7; ++i)
    expected.push_back(rows_from_content(a.next()));  // crosses into epoch 1
  data::DataLoader b(f, config(g_rank, g_world));
  b.next();  // a prefetched step that restore must discard
  b.restore(saved);
  for (int i = 0; i < 7; ++i) EXPECT_EQ(rows_from_content(b.next()), expected[i]) << "step " << i;
  EXPECT_THROW(b.restore(data::LoaderState{0, -1}), runtime::UsageError);
  b.restore(
      data::LoaderState{0, kRows});  // past the end (a resume on a shorter file): the next epoch
  EXPECT_EQ(b.state(), (data::LoaderState{1, 0}));
}

namespace {
constexpr int64_t kPairs = 23;  // odd, so that the epoch's last batch is short
std::string g_pairs_path;

// Pair p: a prompt of token 3 + p, then the chosen answer (token 1000 + p) or the rejected one
// (2000 + p), masked as prepare masks answers; so a row's content names its pair and its side.
void write_pairs() {
  data::Rows rows;
  rows.rows = 2 * kPairs;
  rows.seq_len = kSeq;
  for (int64_t p = 0; p < kPairs; ++p)
    for (int side = 0; side < 2; ++side)
      for (int64_t c = 0; c < kSeq; ++c) {
        const bool answer = c >= 3 + p % 3;
        rows.tokens_data.push_back(static_cast<int32_t>(answer ? 1000 * (side + 1) + p : 3 + p));
        rows.mask_data.push_back(answer);
      }
  data::TokenFileMeta meta;
  meta.format = data::kPreferenceFormat;
  meta.packing = "padding";
  data::write_token_file(g_pairs_path, rows, meta);
}
}  // namespace

TEST(LoaderMpi, PreferencePairsStayTogetherInEveryMicroBatch) {
  data::TokenFile f(g_pairs_path);
  ASSERT_TRUE(f.preference());
  data::LoaderConfig c;
  c.grad_accum = 2;  // accumulation: pairs never split across micro-batches
  c.micro_batch = 2;
  c.rank = g_rank;
  c.world = g_world;
  c.seed = 5;
  data::DataLoader dl(f, c);
  data::LoaderConfig one = c;
  one.rank = 0;
  one.world = 1;
  one.micro_batch = 2 * g_world;
  one.prefetch = false;
  data::DataLoader single(f, one);  // the same global batch of pairs at one rank
  EXPECT_EQ(dl.global_batch(), 4 * g_world) << "--batch-size counts pairs";
  std::vector<int64_t> seen;
  for (int64_t s = 0; s < dl.steps_per_epoch(); ++s) {
    const auto d = dl.next();
    std::vector<int64_t> mine;
    for (const auto& mb : d.micro) {
      const int64_t n = mb.tokens.size(0);
      ASSERT_EQ(n % 2, 0) << "a micro-batch holds whole pairs";
      for (int64_t i = 0; i < n; i += 2) {
        const int64_t pair = mb.tokens[i][0].item<int64_t>() - 3;
        EXPECT_EQ(mb.tokens[i + 1][0].item<int64_t>() - 3, pair) << "the rejected row's prompt";
        EXPECT_EQ(mb.tokens[i][kSeq - 1].item<int64_t>(), 1000 + pair) << "row 2i: chosen";
        EXPECT_EQ(mb.tokens[i + 1][kSeq - 1].item<int64_t>(), 2000 + pair) << "row 2i+1: rejected";
        EXPECT_EQ(mb.sample_ids[i], 2 * pair);
        EXPECT_EQ(mb.sample_ids[i + 1], 2 * pair + 1);
        mine.push_back(pair);
      }
    }
    const auto global = allgather(mine);
    std::vector<int64_t> expected;
    for (const auto& mb : single.next().micro)
      for (int64_t i = 0; i < mb.tokens.size(0); i += 2)
        expected.push_back(mb.tokens[i][0].item<int64_t>() - 3);
    EXPECT_EQ(global, expected) << "step " << s << ": N ranks read one rank's pairs";
    seen.insert(seen.end(), global.begin(), global.end());
  }
  std::sort(seen.begin(), seen.end());
  ASSERT_EQ(seen.size(), static_cast<size_t>(kPairs)) << "an epoch reads every pair once";
  for (int64_t p = 0; p < kPairs; ++p) EXPECT_EQ(seen[p], p);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_world);
  ::testing::InitGoogleTest(&argc, argv);
  std::filesystem::create_directories(SHARDTRAIN_TEST_TMP);
  g_path = std::string(SHARDTRAIN_TEST_TMP) + "/loader_rows_w" + std::to_string(g_world) + ".h5";
  g_pairs_path =
      std::string(SHARDTRAIN_TEST_TMP) + "/loader_pairs_w" + std::to_string(g_world) + ".h5";
  if (g_rank == 0) write_fixture();
  if (g_rank == 0) write_pairs();
  MPI_Barrier(MPI_COMM_WORLD);
  const int rc = RUN_ALL_TESTS();
  int worst = rc;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
