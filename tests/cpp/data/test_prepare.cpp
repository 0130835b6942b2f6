// `shardtrain prepare` against an independent Python reference (tests/python/prepare_reference.py)
// on golden inputs, and every bad-input path.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "run_binary.h"
#include "shardtrain/data/token_file.h"
#include "shardtrain/runtime/sha256.h"

using namespace shardtrain;
using namespace testing_support;
namespace fs = std::filesystem;

namespace {
const std::string kTok = source("data/demo/tokenizer.model");

std::string prepare_cmd(const std::string& input, const std::string& output,
                        const std::string& extra = "") {
  return "prepare --tokenizer " + kTok + " --input " + input + " --output " + output + " " + extra;
}

// Nothing but the named files may exist in dir: no partial or temporary output.
void expect_no_output(const std::string& dir) {
  for (const auto& e : fs::directory_iterator(dir)) ADD_FAILURE() << "left behind: " << e.path();
}

std::string fresh_dir(const std::string& name) {
  const auto d = tmp(name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}
}  // namespace

TEST(Prepare, GoldenFilesMatchThePythonReference) {
  std::ifstream in(std::string(SHARDTRAIN_REF_DIR) + "/prepare/prepare_expected.json");
  const auto ref = nlohmann::json::parse(in);
  ASSERT_EQ(ref["files"].size(), 3u);
  for (const auto& [name, want] : ref["files"].items()) {
    for (const char* fmt : {"auto", "explicit"}) {
      const auto out = tmp("golden_" + name + ".h5");
      const std::string format =
          std::string(fmt) == "auto" ? "auto" : want["format"].get<std::string>();
      auto r =
          run(prepare_cmd(want["path"], out, "--seq-len 64 --mode padding --format " + format));
      ASSERT_EQ(r.code, 0) << r.out;
      EXPECT_NE(r.out.find("read " + std::to_string(want["read"].get<int>())), std::string::npos)
          << r.out;
      data::TokenFile f(out);
      const auto& m = f.meta();
      EXPECT_EQ(m.samples_read, want["read"].get<int64_t>()) << name;
      EXPECT_EQ(nlohmann::json::parse(m.skip_reasons_json), want["skipped"]) << name;
      EXPECT_EQ(m.samples_truncated, want["truncated"].get<int64_t>()) << name;
      EXPECT_EQ(m.samples, want["kept"].get<int64_t>()) << name;
      EXPECT_EQ(m.tokens, want["tokens"].get<int64_t>()) << name;
      EXPECT_EQ(m.loss_tokens, want["loss_tokens"].get<int64_t>()) << name;
      EXPECT_EQ(m.format, want["format"].get<std::string>());
      EXPECT_EQ(m.packing, "padding");
      EXPECT_EQ(m.tokenizer_sha256, runtime::sha256_file(kTok));
      EXPECT_EQ(m.source_sha256, runtime::sha256_file(want["path"]));
      ASSERT_EQ(f.rows(), static_cast<int64_t>(want["rows"].size()));
      ASSERT_EQ(f.seq_len(), 64);
      std::vector<int64_t> all(f.rows());
      for (int64_t i = 0; i < f.rows(); ++i) all[i] = i;
      io::h5::Handle file = io::h5::open_file(out);
      io::h5::Handle tokens = io::h5::open_dataset(file, "tokens"),
                     mask = io::h5::open_dataset(file, "loss_mask");
      const auto t = io::h5::read_rows<int32_t>(tokens, all, 64);
      const auto k = io::h5::read_rows<uint8_t>(mask, all, 64);
      for (int64_t row = 0; row < f.rows(); ++row)
        for (int64_t col = 0; col < 64; ++col) {  // token by token
          ASSERT_EQ(t[row * 64 + col], want["rows"][row][col].get<int32_t>())
              << name << " row " << row << " col " << col;
          ASSERT_EQ(k[row * 64 + col], want["masks"][row][col].get<int>())
              << name << " row " << row << " col " << col;
        }
    }
  }
}

TEST(Prepare, SkippedLinesAreShownWithTheirLineNumbers) {
  auto r =
      run(prepare_cmd(source("tests/data/prepare/alpaca.jsonl"), tmp("shown.h5"), "--seq-len 64"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("alpaca.jsonl:8: missing field"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("alpaca.jsonl:9: not a string"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("alpaca.jsonl:10: empty text"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("skipped 3 (empty text 1, missing field 1, not a string 1)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("truncated to 64: 1"), std::string::npos) << r.out;
}

TEST(Prepare, StrictFailsAtTheFirstBadLineAndWritesNothing) {
  const auto dir = fresh_dir("strict");
  for (const auto& where : {"alpaca.jsonl:8: missing field", "samsum.jsonl:4: empty text",
                            "text.jsonl:4: malformed JSON"}) {
    const std::string file = std::string(where).substr(0, std::string(where).find(':'));
    auto r = run(prepare_cmd(source("tests/data/prepare/" + file), dir + "/out.h5",
                             "--strict --seq-len 64"));
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find(where), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("--strict"), std::string::npos) << r.out;
  }
  expect_no_output(dir);
}

TEST(Prepare, NoUsableSamplesIsAClearErrorWithNoFile) {
  const auto dir = fresh_dir("empty");
  const auto input = tmp("all_bad.jsonl");
  std::ofstream(input) << "{\"text\": \"\"}\nnot json\n{\"text\": \"caf\xe9\"}\n\n";
  auto r = run(prepare_cmd(input, dir + "/out.h5", "--format text"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("no usable samples"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("read 3, skipped 3"), std::string::npos) << r.out;
  expect_no_output(dir);
  std::ofstream(tmp("blank.jsonl")) << "\n   \n";
  EXPECT_EQ(run(prepare_cmd(tmp("blank.jsonl"), dir + "/out.h5")).code, 2);
  expect_no_output(dir);
}

TEST(Prepare, UndetectableFormatAndBadOptionsExit2) {
  const auto input = tmp("unknown.jsonl");
  std::ofstream(input) << "{\"question\": \"?\", \"answer\": \"!\"}\n";
  auto r = run(prepare_cmd(input, tmp("u.h5")));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("--format"), std::string::npos) << r.out;
  EXPECT_EQ(run(prepare_cmd(input, tmp("u.h5"), "--mode zip")).code, 2);
  EXPECT_EQ(run(prepare_cmd(input, tmp("u.h5"), "--seq-len 1")).code, 2);
  EXPECT_EQ(
      run("prepare --tokenizer " + input + " --input " + input + " --output " + tmp("u.h5")).code,
      2);
}

TEST(Prepare, AFailedWriteLeavesNoPartialFile) {
  const auto dir = fresh_dir("failed_write");
  fs::create_directories(dir + "/out.h5");  // a directory where the file should go: rename fails
  auto r = run(prepare_cmd(source("data/demo/val.jsonl"), dir + "/out.h5", "--seq-len 64"));
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_TRUE(fs::is_directory(dir + "/out.h5"));
  fs::remove(dir + "/out.h5");
  expect_no_output(dir);
}

TEST(Prepare, PackingWithAFractionSplit) {
  const auto dir = fresh_dir("packed");
  auto r = run(prepare_cmd(source("data/demo/val.jsonl"), dir + "/train.h5",
                           "--seq-len 128 --val-fraction 0.25 --seed 3"));
  ASSERT_EQ(r.code, 0) << r.out;
  data::TokenFile train(dir + "/train.h5"), val(dir + "/train.val.h5");
  EXPECT_EQ(train.meta().samples + val.meta().samples, 200);
  EXPECT_EQ(val.meta().samples, 50);
  EXPECT_EQ(val.meta().split, "validation");
  EXPECT_EQ(train.meta().packing, "packing");
  for (const data::TokenFile* f : {&train, &val}) {  // packed: whole samples, several to a row
    EXPECT_GE(f->rows(), (f->meta().tokens + 127) / 128);
    EXPECT_LE(2 * f->rows(), f->meta().samples);
  }
  auto b = train.read({0});
  EXPECT_EQ(b.tokens[0][0].item<int64_t>(), 1);  // the first row opens with BOS
  ASSERT_TRUE(b.positions.defined());
  EXPECT_EQ(b.positions[0][0].item<int64_t>(), 0);
  // Each sample restarts its positions at 0 on its BOS.
  EXPECT_TRUE(b.positions[0].eq(0).equal(b.tokens[0].eq(1)));
}

// A sample whose answer --seq-len cuts away entirely trains nothing: it is dropped and counted,
// with the advice to raise --seq-len; a token file without a loss token is refused by train.
TEST(Prepare, AnswersCutAwayAreDroppedAndAFileWithoutLossIsRefused) {
  const auto dir = fresh_dir("cut_answers");
  const std::string input = dir + "/in.jsonl";
  std::string long_instruction;
  for (int i = 0; i < 40; ++i) long_instruction += "reverse the digits and read them back slowly ";
  {
    std::ofstream out(input);
    out << R"({"instruction": ")" << long_instruction << R"(", "input": "", "output": "4321"})"
        << "\n";
    out << R"({"instruction": "Sort", "input": "", "output": "1234"})"
        << "\n";
  }
  auto r = run(prepare_cmd(input, dir + "/out.h5", "--seq-len 128"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("answer cut away by --seq-len 1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("raise --seq-len"), std::string::npos) << r.out;
  EXPECT_EQ(data::TokenFile(dir + "/out.h5").meta().samples, 1);
  // Only the cut one: nothing usable is left, and the reason is named.
  {
    std::ofstream out(input);
    out << R"({"instruction": ")" << long_instruction << R"(", "input": "", "output": "4321"})"
        << "\n";
  }
  r = run(prepare_cmd(input, dir + "/none.h5", "--seq-len 128"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("answer cut away by --seq-len"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir + "/none.h5"));
  // A token file whose rows hold no loss token (written directly: prepare no longer makes one).
  data::Rows rows;
  rows.rows = 2;
  rows.seq_len = 8;
  rows.tokens = 16;
  rows.tokens_data.assign(16, 5);
  rows.mask_data.assign(16, 0);
  rows.position_data.assign(16, 0);
  data::TokenFileMeta meta;
  meta.packing = "padding";
  data::write_token_file(dir + "/no_loss.h5", rows, meta);
  r = run("train --model tiny --data " + dir + "/no_loss.h5 --steps 1 --threads 1");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("holds no token in the loss"), std::string::npos) << r.out;
}
