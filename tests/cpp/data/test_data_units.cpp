// Pure data-side functions: UTF-8, JSONL records, row packing, the split, and the
// shard arithmetic that decides which rank reads which sample.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <string>

#include "shardtrain/data/instruction.h"
#include "shardtrain/data/prepare.h"
#include "shardtrain/data/sampler.h"
#include "shardtrain/data/unicode_text.h"
#include "shardtrain/runtime/error.h"

using namespace shardtrain;

TEST(Utf8, AcceptsValidRejectsInvalid) {
  EXPECT_TRUE(data::valid_utf8(""));
  EXPECT_TRUE(data::valid_utf8("naïve café 日本語 👍🏽"));
  EXPECT_FALSE(data::valid_utf8("caf\xe9"));           // Latin-1
  EXPECT_FALSE(data::valid_utf8("\xc3"));              // truncated
  EXPECT_FALSE(data::valid_utf8("\xc0\xaf"));          // overlong '/'
  EXPECT_FALSE(data::valid_utf8("\xed\xa0\x80"));      // UTF-16 surrogate
  EXPECT_FALSE(data::valid_utf8("\xf4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_FALSE(data::valid_utf8("\xff"));
}

TEST(Records, FormatsAndSkipReasons) {
  auto parse = [](const std::string& line, data::DataFormat f = data::DataFormat::kAuto) {
    return data::parse_line(line, f);
  };
  data::DataFormat f = data::DataFormat::kAuto;
  auto a = data::parse_line(R"({"instruction":"Add.","input":"1 + 2","output":"3"})", f);
  ASSERT_TRUE(a.ok);
  EXPECT_EQ(f, data::DataFormat::kAlpaca);
  EXPECT_EQ(a.record.prompt, data::alpaca_prompt("Add.", "1 + 2"));
  EXPECT_NE(a.record.prompt.find("### Input:\n1 + 2\n\n### Response:"), std::string::npos);
  EXPECT_EQ(
      data::parse_line(R"({"instruction":"Hi","output":"x"})", f).record.prompt.find("### Input"),
      std::string::npos);
  EXPECT_EQ(parse(R"({"dialogue":"A: hi","summary":"greeting"})").record.prompt,
            "Summarize this dialog:\nA: hi\n---\nSummary:\n");
  EXPECT_EQ(parse(R"({"text":"plain"})").record.answer, "plain");
  EXPECT_EQ(parse(R"({"text":"abc")").reason, "malformed JSON");
  EXPECT_EQ(parse(R"([1,2])").reason, "malformed JSON");
  EXPECT_EQ(parse(R"({"text":"a","n":8e888888})").reason,
            "malformed JSON");  // nlohmann's out_of_range escaped before (fuzz_prepare_records)
  EXPECT_EQ(parse("{\"text\":\"caf\xe9\"}").reason, "invalid UTF-8");
  EXPECT_EQ(parse(R"({"instruction":"x"})", data::DataFormat::kAlpaca).reason, "missing field");
  EXPECT_EQ(parse(R"({"text":"  "})", data::DataFormat::kText).reason, "empty text");
  EXPECT_EQ(parse(R"({"text":5})", data::DataFormat::kText).reason, "not a string");
  data::DataFormat unknown = data::DataFormat::kAuto;
  EXPECT_THROW(data::parse_line(R"({"question":"?"})", unknown), runtime::UsageError);
  EXPECT_THROW(data::parse_format("csv"), runtime::UsageError);
}

namespace {
data::Sample sample(std::vector<int32_t> ids, std::vector<uint8_t> mask) {
  return {std::move(ids), std::move(mask)};
}
}  // namespace

TEST(Rows, PaddingPutsOneSamplePerRow) {
  auto r = data::make_rows({sample({1, 5, 6}, {0, 1, 1}), sample({1, 7}, {0, 1})}, 4,
                           /*packing=*/false, 2);
  EXPECT_EQ(r.rows, 2);
  EXPECT_EQ(r.tokens_data, (std::vector<int32_t>{1, 5, 6, 2, 1, 7, 2, 2}));
  EXPECT_EQ(r.mask_data, (std::vector<uint8_t>{0, 1, 1, 0, 0, 1, 0, 0}));
  EXPECT_EQ(r.tokens, 5);
  EXPECT_EQ(r.loss_tokens, 3);
}

TEST(Rows, PackingKeepsSamplesWholeAndRestartsTheirPositions) {
  auto r = data::make_rows(
      {sample({1, 5, 6}, {0, 1, 1}), sample({1, 7, 8}, {1, 1, 1}), sample({1, 9}, {0, 1})}, 3, true,
      2);
  EXPECT_EQ(r.rows, 3);
  EXPECT_EQ(r.tokens_data, (std::vector<int32_t>{1, 5, 6, 1, 7, 8, 1, 9, 2}));
  // A sample's first token is no target, though its own mask says 1: nothing of the sample precedes
  // it.
  EXPECT_EQ(r.mask_data, (std::vector<uint8_t>{0, 1, 1, 0, 1, 1, 0, 1, 0}));
  EXPECT_EQ(r.loss_tokens, 5);
  EXPECT_EQ(r.position_data,
            (std::vector<int32_t>{0, 1, 2, 0, 1, 2, 0, 1, 2}));  // the padded tail continues
  // A sample that does not fit in what is left of a row starts the next one: none crosses rows.
  auto next = data::make_rows(
      {sample({1, 5}, {0, 1}), sample({1, 7, 8}, {0, 1, 1}), sample({1}, {1})}, 4, true, 0);
  EXPECT_EQ(next.tokens_data, (std::vector<int32_t>{1, 5, 0, 0, 1, 7, 8, 1}));
  EXPECT_EQ(next.mask_data, (std::vector<uint8_t>{0, 1, 0, 0, 0, 1, 1, 0}));
  EXPECT_EQ(next.position_data, (std::vector<int32_t>{0, 1, 2, 3, 0, 1, 2, 0}));
  EXPECT_EQ(next.tokens, 6);
  EXPECT_EQ(next.loss_tokens, 3);
}

TEST(Split, ValidationChoiceIsSeededAndSized) {
  auto v = data::validation_choice(1000, 0.1, 7);
  EXPECT_EQ(std::count(v.begin(), v.end(), true), 100);
  EXPECT_EQ(v, data::validation_choice(1000, 0.1, 7));
  EXPECT_NE(v, data::validation_choice(1000, 0.1, 8));
  auto tiny = data::validation_choice(3, 0.01, 1);
  EXPECT_EQ(std::count(tiny.begin(), tiny.end(), true), 1);  // at least one each side
  auto most = data::validation_choice(3, 0.99, 1);
  EXPECT_EQ(std::count(most.begin(), most.end(), true), 2);
}

TEST(Sampler, EpochPermutationIsDeterministicPermutation) {
  auto a = data::epoch_permutation(1000, 42, 3), b = data::epoch_permutation(1000, 42, 3);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, data::epoch_permutation(1000, 42, 4));
  auto s = a;
  std::sort(s.begin(), s.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(s[i], i);
}

TEST(Sampler, BalancedPartsTileTheRange) {
  for (int64_t count : {0, 1, 5, 7, 12})
    for (int64_t parts : {1, 2, 3, 5}) {
      int64_t next = 0;
      for (int64_t i = 0; i < parts; ++i) {
        auto [b, e] = data::balanced_part(count, parts, i);
        EXPECT_EQ(b, next);
        EXPECT_LE(e - b, count / parts + 1);
        EXPECT_GE(e - b, count / parts);
        next = e;
      }
      EXPECT_EQ(next, count);
    }
  EXPECT_EQ(data::steps_per_epoch(50, 6, false), 9);
  EXPECT_EQ(data::steps_per_epoch(50, 6, true), 8);
}

// Any world size partitions each global batch exactly; concatenated in rank order it is the batch.
TEST(Sampler, RanksPartitionEveryGlobalBatchAtAnyWorldSize) {
  const auto order = data::epoch_permutation(50, 3, 0);
  for (int64_t step = 0; step < data::steps_per_epoch(50, 6, false); ++step) {
    const auto batch = data::global_batch(order, 6, step * 6);
    for (int world : {1, 2, 3, 4})
      for (int64_t accum : {1, 2}) {
        std::vector<int64_t> joined;
        for (int r = 0; r < world; ++r)
          for (const auto& mb : data::rank_micro_batches(batch, r, world, accum))
            joined.insert(joined.end(), mb.begin(), mb.end());
        EXPECT_EQ(joined, batch) << "world " << world << " accum " << accum << " step " << step;
      }
  }
  EXPECT_EQ(data::global_batch(order, 6, 48).size(), 2u);  // 50 = 8 * 6 + 2: the short last batch
}

// Positions are rows: stepping 12 rows or 6 at a time passes the same rows in the same order,
// and an epoch ends where its rows run out (drop_last: where a whole batch no longer fits).
TEST(Sampler, PositionsAreRowsSoAnyGlobalBatchReadsTheSameStream) {
  EXPECT_EQ(data::next_position({0, 36}, 50, 12, false), (data::LoaderState{0, 48}));
  EXPECT_EQ(data::next_position({0, 48}, 50, 12, false), (data::LoaderState{1, 0}))
      << "the short batch of 2 ends the epoch";
  EXPECT_EQ(data::next_position({0, 36}, 50, 12, true), (data::LoaderState{1, 0}))
      << "drop_last: 2 rows left are dropped";
  EXPECT_EQ(data::next_position({3, 0}, 50, 6, false), (data::LoaderState{3, 6}));
  const auto order = data::epoch_permutation(50, 3, 0);
  std::vector<int64_t> by12, by6;
  for (data::LoaderState p{0, 0}; p.epoch == 0; p = data::next_position(p, 50, 12, false)) {
    const auto b = data::global_batch(order, 12, p.row);
    by12.insert(by12.end(), b.begin(), b.end());
  }
  for (data::LoaderState p{0, 24}; p.epoch == 0;
       p = data::next_position(p, 50, 6, false)) {  // resumed after 2 steps of 12
    const auto b = data::global_batch(order, 6, p.row);
    by6.insert(by6.end(), b.begin(), b.end());
  }
  EXPECT_EQ(std::vector<int64_t>(by12.begin() + 24, by12.end()), by6);
  EXPECT_EQ(by12, order);
}

// Progress counts steps of the reference batch: at that batch it is the step count exactly, at
// another it moves with the rows read, and --steps/--epochs totals cover the same rows.
TEST(Sampler, ProgressCountsStepsOfTheReferenceBatchAtAnyBatch) {
  // 50 rows, reference batch 12: 5 steps an epoch (the fifth short), 60 rows of progress.
  EXPECT_EQ(data::epoch_progress_rows(50, 12, false), 60);
  data::LoaderState p;
  for (int64_t step = 0; step < 13; ++step) {
    EXPECT_EQ(data::progress_rows(p, 50, 12, false), 12 * step) << "step " << step;
    p = data::next_position(p, 50, 12, false);
  }
  EXPECT_EQ(data::progress_rows({1, 18}, 50, 12, false), 78) << "a 6-row run, 3 steps into epoch 1";
  // Two epochs from the start: 10 steps of 12, 18 of 6, 6 of 24 (24, 24 and 2 rows an epoch).
  EXPECT_EQ(data::steps_until({0, 0}, 120, 50, 12, 12, false), 10);
  EXPECT_EQ(data::steps_until({0, 0}, 120, 50, 6, 12, false), 18);
  EXPECT_EQ(data::steps_until({0, 0}, 120, 50, 24, 12, false), 6);
  // Resumed after 3 steps of 12 (row 36) with 6-row batches: epoch 0's 14 rows in 3 steps, then 9.
  EXPECT_EQ(data::steps_until({0, 36}, 120, 50, 6, 12, false), 12);
  // --steps 20 at reference 12 over 50-row epochs, resumed at step 10 (epoch 2, row 0) with
  // batch 6.
  EXPECT_EQ(data::steps_until({2, 0}, 240, 50, 6, 12, false), 18);
  // drop_last: a smaller batch reads past the reference's tail; progress stops at the epoch's rows.
  EXPECT_EQ(data::epoch_progress_rows(50, 12, true), 48);
  EXPECT_EQ(data::progress_rows({0, 50}, 50, 12, true), 48);
}
