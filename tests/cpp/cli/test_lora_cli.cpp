// LoRA through the binary, as users run it: bad options and a mismatched base exit 2 with one
// line; a LoRA checkpoint resumes at other world sizes and strategies; inspect shows the
// adapters; the exported adapter loads in PEFT and the merged weights in transformers with
// shardtrain's loss (tests/python/check_peft_export.py); generate --lora applies the adapter.
#include <gtest/gtest.h>

#include <filesystem>

#include "parser_refusal.h"
#include "run_binary.h"

using namespace testing_support;

namespace {
const std::string kDemo = std::string(SHARDTRAIN_TEST_TMP) + "/demo";
const std::string kTrain = "train --threads 1 --data " + kDemo + "/train.h5 ";
std::string mpirun(int np) { return std::string(SHARDTRAIN_MPIEXEC) + std::to_string(np) + " "; }

// Two tiny base models saved by 3 steps of full fine-tuning (seeds 1234 and 9): the lora_bases
// fixture.
std::string base(int seed) {
  const auto dir = tmp("lora_base_" + std::to_string(seed));
  EXPECT_TRUE(std::filesystem::exists(dir + "/model.safetensors"))
      << dir << ": run the lora_bases fixture";
  return dir;
}

// LoRA on q, v and down_proj, dropout 0 so that a resumed run draws no different masks.
std::string lora_train(const std::string& b) {
  return kTrain + "--weights " + b +
         " --lora-rank 4 --lora-alpha 16 --lora-dropout 0 --lora-targets q_proj,v_proj,down_proj "
         "--lr 1e-2 ";
}

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}
}  // namespace

// The parser's refusals, in this process; the first also at 2 ranks, where every rank refuses.
TEST(LoraCli, BadOptionsExit2NamingTheOption) {
  for (const auto& [args, opt] : std::vector<std::pair<std::string, std::string>>{
           {"--lora-rank -1", "--lora-rank"},
           {"--lora-rank 8 --lora-targets q_proj,lm_head", "--lora-targets"},
           {"--lora-rank 8 --lora-dropout 1", "--lora-dropout"},
           {"--lora-rank 8 --lora-dropout -0.5", "--lora-dropout"}}) {
    const auto said = parser_refusal(kTrain + "--steps 1 " + args);
    ASSERT_TRUE(said.has_value()) << args;
    EXPECT_EQ(said->rfind(opt, 0), 0u) << args << ": " << *said;
  }
  auto r = run(kTrain + "--steps 1 --lora-rank -1", mpirun(2));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("shardtrain: error: --lora-rank"), std::string::npos) << r.out;
}

TEST(LoraCli, ResumesAtOtherWorldSizesAndRefusesAnotherBase) {
  const auto dir = tmp("lora_ckpt"), whole = tmp("lora_whole.jsonl");
  std::filesystem::remove_all(dir);
  auto r = run(lora_train(base(1234)) + "--steps 8 --batch-size 4 --checkpoint-dir " + dir +
                   " --save-every 4 --metrics-file " + whole,
               mpirun(2));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("lora        rank 4, alpha 16, dropout 0, targets q_proj,v_proj,down_proj"),
            std::string::npos)
      << r.out;
  const auto all = read_jsonl(whole);
  ASSERT_EQ(all.size(), 8u);
  EXPECT_GT(all.back()["memory"]["base_bytes"].get<int64_t>(), 0);
  EXPECT_GT(all.back()["memory"]["adapter_bytes"].get<int64_t>(), 0);
  const std::string ckpt = dir + "/step-00000004.h5";
  // Steps 5-8 from the step-4 checkpoint: 4 ranks as 2 nodes x 2 (hybrid), and 1 rank with
  // activation checkpointing.
  for (const auto& [np, extra] : std::vector<std::pair<int, std::string>>{
           {4, "--batch-size 2 --sharding hybrid_shard --ranks-per-node 2"},
           {1, "--batch-size 8 --activation-checkpointing"}}) {
    const auto part = tmp("lora_part.jsonl");
    auto p = run(lora_train(base(1234)) + "--steps 8 --resume " + ckpt + " --metrics-file " + part +
                     " " + extra,
                 mpirun(np));
    ASSERT_EQ(p.code, 0) << p.out;
    EXPECT_NE(p.out.find("resumed from " + ckpt + " at step 4"), std::string::npos) << p.out;
    const auto rows = read_jsonl(part);
    ASSERT_EQ(rows.size(), 4u);
    for (size_t i = 0; i < rows.size(); ++i) {
      const double a = all[i + 4]["loss"], b = rows[i]["loss"];
      EXPECT_NEAR(b, a, 1e-6 * a) << "step " << i + 5 << " on " << np << " ranks " << extra;
    }
  }
  // Another base: refused with one line, even with --resume auto (an older checkpoint is no
  // better).
  for (const std::string& resume : {ckpt, std::string("auto --checkpoint-dir ") + dir}) {
    auto bad = run(lora_train(base(9)) + "--steps 8 --batch-size 4 --resume " + resume, mpirun(2));
    EXPECT_EQ(bad.code, 2) << bad.out;
    EXPECT_NE(bad.out.find("was trained on base weights " + base(1234)), std::string::npos)
        << bad.out;
    EXPECT_EQ(count(bad.out, "shardtrain: error:"), 1) << bad.out;
  }
  auto rank8 = run(kTrain + "--weights " + base(1234) + " --lora-rank 8 --steps 8 --resume " + ckpt,
                   mpirun(2));
  EXPECT_EQ(rank8.code, 2) << rank8.out;
  EXPECT_NE(rank8.out.find(
                "holds LoRA rank 4 on q_proj,v_proj,down_proj but this run asks for LoRA rank 8"),
            std::string::npos)
      << rank8.out;
  auto inspect = run("inspect " + ckpt);
  EXPECT_EQ(inspect.code, 0) << inspect.out;
  EXPECT_NE(
      inspect.out.find("lora rank 4, alpha 16, dropout 0, targets q_proj,v_proj,down_proj | base " +
                       base(1234)),
      std::string::npos)
      << inspect.out;
  EXPECT_NE(inspect.out.find("/model/model.layers.1.mlp.down_proj.lora_B.weight"),
            std::string::npos)
      << inspect.out;
  EXPECT_NE(inspect.out.find("36 datasets, all checksums ok"), std::string::npos)
      << "2 layers x 3 targets x A, B x 3 groups\n"
      << inspect.out;
}

// With dropout on, a resume at the same world size draws the masks the uninterrupted run drew:
// the checkpoint keeps the count of passes the masks are drawn from.
TEST(LoraCli, ResumeWithDropoutDrawsTheSameMasks) {
  const auto dir = tmp("lora_dropout_ckpt");
  const auto whole = tmp("lora_dropout_whole.jsonl");
  const auto part = tmp("lora_dropout_part.jsonl");
  std::filesystem::remove_all(dir);
  const std::string train = kTrain + "--weights " + base(1234) +
                            " --lora-rank 4 --lora-dropout 0.3 --lr 1e-2 --batch-size 4 --steps 6 ";
  auto r =
      run(train + "--checkpoint-dir " + dir + " --save-every 3 --metrics-file " + whole, mpirun(2));
  ASSERT_EQ(r.code, 0) << r.out;
  auto p = run(train + "--resume " + dir + "/step-00000003.h5 --metrics-file " + part, mpirun(2));
  ASSERT_EQ(p.code, 0) << p.out;
  const auto all = read_jsonl(whole);
  const auto rows = read_jsonl(part);
  ASSERT_EQ(all.size(), 6u);
  ASSERT_EQ(rows.size(), 3u);
  for (size_t i = 0; i < rows.size(); ++i)
    EXPECT_EQ(rows[i]["loss"].get<double>(), all[i + 3]["loss"].get<double>()) << "step " << i + 4;
}

TEST(LoraCli, PeftLoadsTheAdapterAndTransformersTheMergedWeights) {
  const auto adapter = tmp("lora_adapter"), merged = tmp("lora_merged"),
             conv = tmp("lora_converted");
  std::filesystem::remove_all(tmp("lora_export_ckpt"));
  auto a = run(lora_train(base(1234)) + "--steps 6 --batch-size 4 --save-model " + adapter +
                   " --checkpoint-dir " + tmp("lora_export_ckpt"),
               mpirun(2));
  ASSERT_EQ(a.code, 0) << a.out;
  auto m =
      run(lora_train(base(1234)) + "--steps 6 --batch-size 4 --merge-lora --save-model " + merged,
          mpirun(2));
  ASSERT_EQ(m.code, 0) << m.out;
  // convert of the run's checkpoint on 3 ranks writes the same adapter, byte for byte.
  auto c = run("convert --input " + tmp("lora_export_ckpt") + "/step-00000006.h5 --output " + conv,
               mpirun(3));
  ASSERT_EQ(c.code, 0) << c.out;
  EXPECT_EQ(
      shell("cmp " + conv + "/adapter_model.safetensors " + adapter + "/adapter_model.safetensors")
          .code,
      0);
  auto check = shell(std::string(SHARDTRAIN_PYTHON) + " " + SHARDTRAIN_SOURCE_DIR +
                     "/tests/python/check_peft_export.py " + SHARDTRAIN_BIN + " " + base(1234) +
                     " " + adapter + " " + merged + " " + kDemo + "/train.val.h5");
  EXPECT_EQ(check.code, 0) << check.out;
  // generate applies the adapter: greedy output with it equals greedy output of the merged weights.
  const std::string gen = "generate --threads 1 --tokenizer " + std::string(SHARDTRAIN_SOURCE_DIR) +
                          "/data/demo/tokenizer.model --template alpaca --prompt 'Reverse the "
                          "digits: 1234' --max-new-tokens 12 ";
  auto with = run(gen + "--weights " + base(1234) + " --lora " + adapter),
       full = run(gen + "--weights " + merged);
  EXPECT_EQ(with.code, 0) << with.out;
  auto answer = [](const std::string& out) {
    return out.substr(out.find('\n') + 1);
  };  // after the "loaded" log line
  EXPECT_EQ(answer(with.out), answer(full.out)) << with.out << full.out;
  auto missing = run(gen + "--weights " + base(1234) + " --lora " + base(9));
  EXPECT_EQ(missing.code, 2) << missing.out;
  EXPECT_NE(missing.out.find("--lora: " + base(9) + " needs adapter_config.json"),
            std::string::npos)
      << missing.out;
}
