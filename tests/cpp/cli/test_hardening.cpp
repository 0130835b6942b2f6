// Hardening: data and file errors end the run with one line and exit 2 before step
// 1; SIGTERM/SIGINT stop every rank at the same step boundary; a non-finite loss or gradient
// norm is caught before the optimizer step. The pure parts are checked directly, the rest by
// running the binary under mpirun as users do.
#include <gtest/gtest.h>
#include <signal.h>

#include <ATen/ATen.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "one_line_errors.h"
#include "run_binary.h"
#include "shardtrain/cli/run_checks.h"
#include "shardtrain/data/sampler.h"
#include "shardtrain/data/token_file.h"
#include "shardtrain/io/h5.h"
#include "shardtrain/io/safetensors.h"
#include "shardtrain/runtime/signals.h"
#include "shardtrain/runtime/writable.h"
#include "shardtrain/train/nonfinite.h"
#include "shardtrain/train/signal_handler.h"

using namespace shardtrain;
using namespace testing_support;
namespace fs = std::filesystem;

namespace {
const std::string kDemo = std::string(SHARDTRAIN_TEST_TMP) + "/demo";
const std::string kBin = SHARDTRAIN_BIN;
const std::string kTrain = "train --model tiny --threads 1 --batch-size 4 ";
std::string mpirun(int np) { return std::string(SHARDTRAIN_MPIEXEC) + std::to_string(np) + " "; }

// A small token file: rows x 16 tokens below 500, all in the loss.
data::Rows small_rows(int64_t rows) {
  data::Rows r;
  r.rows = rows;
  r.seq_len = 16;
  r.tokens = rows * 16;
  r.loss_tokens = rows * 16;
  for (int64_t i = 0; i < rows * 16; ++i)
    r.tokens_data.push_back(static_cast<int32_t>(3 + (i * 37) % 497));
  r.mask_data.assign(rows * 16, 1);
  return r;
}
}  // namespace

// ---- the pure parts ----

TEST(Signals, VerdictPerPolicy) {
  const bool ckpt = true, none = false;
  auto v = train::signal_verdict(runtime::kSignalCheckpoint, train::OnSignal::kContinue,
                                 ckpt);  // the old SIGUSR1 behaviour
  EXPECT_TRUE(v.save && !v.stop);
  EXPECT_EQ(v.reason, "SIGUSR1");
  v = train::signal_verdict(runtime::kSignalCheckpoint, train::OnSignal::kExit, ckpt);
  EXPECT_TRUE(v.save && v.stop);
  EXPECT_EQ(v.exit_code, runtime::kExitCheckpointed);
  v = train::signal_verdict(runtime::kSignalCheckpoint, train::OnSignal::kExit,
                            none);  // nothing to save: not caught at all
  EXPECT_FALSE(v.save || v.stop);
  for (train::OnSignal p : {train::OnSignal::kContinue,
                            train::OnSignal::kExit}) {  // SIGTERM saves by default when it can
    v = train::signal_verdict(runtime::kSignalTerminate, p, ckpt);
    EXPECT_TRUE(v.save && v.stop);
    EXPECT_EQ(v.exit_code, runtime::kExitCheckpointed);
    EXPECT_EQ(v.reason, "SIGTERM");
    v = train::signal_verdict(runtime::kSignalTerminate, p, none);
    EXPECT_TRUE(!v.save && v.stop);
    EXPECT_EQ(v.exit_code, runtime::kExitTerminated);
  }
  v = train::signal_verdict(runtime::kSignalTerminate, train::OnSignal::kExitNoSave, ckpt);
  EXPECT_TRUE(!v.save && v.stop);
  EXPECT_EQ(v.exit_code, 143);
  v = train::signal_verdict(runtime::kSignalInterrupt, train::OnSignal::kExitNoSave, ckpt);
  EXPECT_EQ(v.exit_code, 130);
  EXPECT_EQ(v.reason, "SIGINT");
  v = train::signal_verdict(runtime::kSignalInterrupt | runtime::kSignalCheckpoint,
                            train::OnSignal::kExitNoSave, ckpt);  // USR1 still saves
  EXPECT_TRUE(v.save && v.stop);
  EXPECT_EQ(v.exit_code, runtime::kExitCheckpointed);
  EXPECT_EQ(train::signal_verdict(0, train::OnSignal::kExit, ckpt).reason, "");
  EXPECT_THROW(train::parse_on_signal("save"), runtime::UsageError);
  EXPECT_EQ(train::parse_on_signal("exit-nosave"), train::OnSignal::kExitNoSave);
}

TEST(Signals, HandlersRecordEverySignalOnce) {
  runtime::install_stop_signals(true);
  runtime::take_pending_signals();
  raise(SIGTERM);
  raise(SIGUSR1);
  EXPECT_EQ(runtime::take_pending_signals(),
            runtime::kSignalTerminate | runtime::kSignalCheckpoint);
  EXPECT_EQ(runtime::take_pending_signals(), 0) << "taking clears";
  raise(SIGINT);
  EXPECT_EQ(runtime::take_pending_signals(), runtime::kSignalInterrupt);
}

TEST(Nonfinite, StopNamesTheStepAndRows) {
  train::NonfiniteGuard g({/*skip=*/false, 10}, "train.h5");
  EXPECT_TRUE(g.check(1, 2.5, 1.0, {1, 2}).finite);
  const auto v = g.check(7, std::nan(""), 1.0, {12, 3, 40});
  EXPECT_FALSE(v.finite);
  EXPECT_TRUE(v.stop);
  EXPECT_NE(v.message.find("step 7"), std::string::npos) << v.message;
  EXPECT_NE(v.message.find("rows [12, 3, 40] of train.h5"), std::string::npos) << v.message;
  EXPECT_TRUE(g.check(8, 1.0, INFINITY, {}).stop) << "an infinite gradient norm too";
}

TEST(Nonfinite, SkipCountsAndStopsAfterNInARow) {
  train::NonfiniteGuard g({/*skip=*/true, 3}, "d.h5");
  EXPECT_FALSE(g.check(1, NAN, 1, {}).stop);
  EXPECT_FALSE(g.check(2, NAN, 1, {}).stop);
  EXPECT_TRUE(g.check(3, 1, 1, {}).finite);  // a finite step resets the run of skips
  EXPECT_FALSE(g.check(4, 1, NAN, {}).stop);
  EXPECT_FALSE(g.check(5, 1, NAN, {}).stop);
  const auto v = g.check(6, -INFINITY, 1, {});
  EXPECT_TRUE(v.stop);
  EXPECT_NE(v.message.find("3 non-finite steps in a row"), std::string::npos) << v.message;
  EXPECT_EQ(g.skipped(), 5);
  EXPECT_EQ(train::format_rows({1, 2, 3, 4}, 2), "[1, 2, ... (4 rows)]");
}

TEST(RunChecks, ProbeWritableDirCreatesNothing) {
  const auto base = tmp("probe");
  fs::remove_all(base);
  fs::create_directories(base);
  EXPECT_EQ(runtime::probe_writable_dir(base + "/a/b/c"), "");
  EXPECT_FALSE(fs::exists(base + "/a")) << "the probe must not leave directories behind";
  EXPECT_TRUE(fs::is_empty(base)) << "nor probe files";
  std::ofstream(base + "/file") << "x";
  EXPECT_NE(runtime::probe_writable_dir(base + "/file/ckpt"), "");
}

// ---- item 3: data and file errors, through the binary ----

TEST(DataErrors, TruncatedTokenFileIsOneLineExit2) {
  const auto t = tmp("truncated.h5");
  fs::copy_file(kDemo + "/train.h5", t, fs::copy_options::overwrite_existing);
  fs::resize_file(t, fs::file_size(t) / 2);  // a copy cut off half-way
  const auto metrics = tmp("truncated.jsonl"), ckpt = tmp("truncated_ckpt");
  fs::remove(metrics), fs::remove_all(ckpt);
  auto r = run(
      kTrain + "--steps 2 --data " + t + " --metrics-file " + metrics + " --checkpoint-dir " + ckpt,
      mpirun(2));
  expect_one_line_exit2(r, t + " is truncated or damaged");
  EXPECT_FALSE(fs::exists(metrics)) << "nothing partial left behind";
  EXPECT_FALSE(fs::exists(ckpt)) << "nothing partial left behind";
}

TEST(DataErrors, Hdf5ThatIsNotATokenFile) {
  const auto t = tmp("not_tokens.h5");
  {
    io::h5::Handle f = io::h5::create_file(t);
    io::h5::write_attr(f, "hello", int64_t{1});
  }
  expect_one_line_exit2(run(kTrain + "--steps 2 --data " + t, mpirun(2)),
                        "is not a shardtrain token file");
}

// A token id past the vocabulary, in a row of rank 1's half, with the attribute that would have
// caught it removed: the scan at open finds it and names the row, once.
TEST(DataErrors, TokenIdOutsideVocabNamesTheRow) {
  const auto t = tmp("bad_token.h5");
  data::Rows rows = small_rows(40);
  rows.tokens_data[33 * 16 + 5] = 700;  // tiny's vocab_size is 512
  data::TokenFileMeta meta;
  meta.format = "text";
  meta.packing = "none";
  data::write_token_file(t, rows, meta);
  {
    io::h5::Handle f(H5Fopen(t.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
    ASSERT_GE(H5Adelete(f, "max_token_id"), 0);
  }
  expect_one_line_exit2(
      run(kTrain + "--steps 2 --data " + t, mpirun(2)),
      "row 33 holds token id 700 at position 5, outside the model's vocabulary [0, 512)");
  // And a negative id, which no attribute records.
  rows.tokens_data[33 * 16 + 5] = 3, rows.tokens_data[2 * 16] = -4;
  data::write_token_file(t, rows, meta);
  expect_one_line_exit2(run(kTrain + "--steps 2 --data " + t, mpirun(2)),
                        "row 2 holds token id -4 at position 0");
}

// A checkpoint cut short (a copy, a full disk) or an HDF5 file that is not one: exit 2, one line.
// --resume auto skips a damaged newest checkpoint and takes the one before (test_cli_mpi).
TEST(DataErrors, TruncatedOrForeignCheckpoint) {
  const auto dir = tmp("trunc_ckpt");
  fs::remove_all(dir);
  auto a =
      run(kTrain + "--steps 1 --data " + kDemo + "/train.h5 --checkpoint-dir " + dir, mpirun(2));
  ASSERT_EQ(a.code, 0) << a.out;
  const auto ckpt = dir + "/step-00000001.h5";
  fs::resize_file(ckpt, fs::file_size(ckpt) * 2 / 3);
  expect_one_line_exit2(
      run(kTrain + "--steps 2 --data " + kDemo + "/train.h5 --resume " + ckpt, mpirun(2)),
      ckpt + " is truncated or damaged (HDF5: ");
  const auto foreign = tmp("foreign.h5");
  { io::h5::Handle f = io::h5::create_file(foreign); }
  expect_one_line_exit2(
      run(kTrain + "--steps 2 --data " + kDemo + "/train.h5 --resume " + foreign, mpirun(2)),
      foreign + " is not a shardtrain checkpoint");
}

TEST(DataErrors, TokenizerLargerThanTheModel) {
  // The demo data was tokenized with a 512-piece tokenizer; a 256-word model cannot embed it.
  expect_one_line_exit2(
      run(kTrain + "--vocab-size 256 --steps 2 --data " + kDemo + "/train.h5", mpirun(2)),
      "was tokenized with a 512-piece tokenizer but the model's vocab_size is 256");
  auto g = run("generate --model tiny --vocab-size 256 --threads 1 --weights " + kDemo +
               " --tokenizer " + source("data/demo/tokenizer.model") + " --prompt hi");
  EXPECT_EQ(g.code, 2) << g.out;
  EXPECT_NE(g.out.find("has 512 pieces but the model's vocab_size is 256"), std::string::npos)
      << g.out;
}

TEST(DataErrors, CheckpointOfAnotherShapeNamesBoth) {
  const auto dir = tmp("shape_ckpt");
  fs::remove_all(dir);
  auto a =
      run(kTrain + "--steps 1 --data " + kDemo + "/train.h5 --checkpoint-dir " + dir, mpirun(2));
  ASSERT_EQ(a.code, 0) << a.out;
  for (const std::string& resume : {std::string("auto"), dir + "/step-00000001.h5"}) {
    auto r = run(kTrain + "--intermediate-size 128 --steps 2 --data " + kDemo +
                     "/train.h5 --checkpoint-dir " + dir + " --resume " + resume,
                 mpirun(2));
    expect_one_line_exit2(r,
                          "holds a model of shape vocab 512, hidden 64, intermediate 176, 2 "
                          "layers, 4 heads, 2 kv heads "
                          "but --model tiny has vocab 512, hidden 64, intermediate 128");
  }
}

TEST(DataErrors, WeightsOfAnotherShapeOrDtype) {
  const auto dir = tmp("shape_weights");
  fs::remove_all(dir);
  auto a = run(kTrain + "--steps 1 --data " + kDemo + "/train.h5 --save-model " + dir, mpirun(1));
  ASSERT_EQ(a.code, 0) << a.out;
  auto r = run(
      kTrain + "--intermediate-size 128 --steps 1 --data " + kDemo + "/train.h5 --weights " + dir,
      mpirun(2));
  expect_one_line_exit2(r,
                        "has shape [176, 64] but the model config (--model tiny) needs [128, 64]");
  // F32 tensors under a config.json that says bfloat16: not the config that came with them.
  nlohmann::json cfg;
  std::ifstream(dir + "/config.json") >> cfg;
  ASSERT_EQ(cfg["torch_dtype"], "float32");
  cfg["torch_dtype"] = "bfloat16";
  std::ofstream(dir + "/config.json") << cfg.dump();
  r = run("train --model " + dir + " --threads 1 --batch-size 4 --steps 1 --data " + kDemo +
              "/train.h5 --weights " + dir,
          mpirun(2));
  expect_one_line_exit2(r, "tensor 'model.embed_tokens.weight' in " + dir +
                               "/model.safetensors has dtype F32 but " + dir +
                               "/config.json says torch_dtype \"bfloat16\"");
  // The same tensors with one stored as int32: not weights shardtrain can read.
  io::SafetensorsModel m(dir);
  io::NamedTensors t;
  for (const auto& n : m.names())
    t.emplace_back(n, n == "model.norm.weight" ? m.read(n).to(at::kInt) : m.read(n));
  io::write_safetensors(dir + "/model.safetensors", t, {{"format", "pt"}});
  r = run(kTrain + "--steps 1 --data " + kDemo + "/train.h5 --weights " + dir, mpirun(2));
  expect_one_line_exit2(
      r, "tensor 'model.norm.weight' in " + dir + "/model.safetensors has dtype I32");
}

TEST(DataErrors, UnwritableOutputsFoundBeforeStep1) {
  const auto file = tmp("a_file");
  std::ofstream(file) << "x";
  const std::string data = "--steps 2 --data " + kDemo + "/train.h5 ";
  expect_one_line_exit2(run(kTrain + data + "--checkpoint-dir " + file + "/ckpt", mpirun(2)),
                        "--checkpoint-dir " + file + "/ckpt: " + file + " is not a directory");
  expect_one_line_exit2(run(kTrain + data + "--save-model " + file + "/model", mpirun(2)),
                        "--save-model");
  expect_one_line_exit2(run(kTrain + data + "--metrics-file " + file + "/m.jsonl", mpirun(2)),
                        "--metrics-file");
  expect_one_line_exit2(run(kTrain + data + "--metrics-file " + tmp(""), mpirun(2)),
                        "is a directory; name a file");
  auto p = run("prepare --tokenizer " + source("data/demo/tokenizer.model") + " --input " +
               source("data/demo/val.jsonl") + " --output " + file + "/out.h5");
  EXPECT_EQ(p.code, 2) << p.out;
  EXPECT_NE(
      p.out.find("--output: cannot write " + file + "/out.h5: " + file + " is not a directory"),
      std::string::npos)
      << p.out;
}

// prepare makes its outputs' missing directories, as train does; a bad output path is one line
// naming the option, before any tokenizing.
TEST(DataErrors, PrepareMakesOutputDirectoriesAndNamesTheOptionOnFailure) {
  const auto dir = tmp("prepare_dirs");
  fs::remove_all(dir);
  const std::string prepare = "prepare --tokenizer " + source("data/demo/tokenizer.model") +
                              " --input " + source("data/demo/val.jsonl") +
                              " --seq-len 64 --val-fraction 0.2";
  auto r = run(prepare + " --output " + dir + "/a/b/train.h5 --val-output " + dir + "/v/w/val.h5");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(fs::is_regular_file(dir + "/a/b/train.h5")) << r.out;
  EXPECT_TRUE(fs::is_regular_file(dir + "/v/w/val.h5")) << r.out;
  ASSERT_EQ(run(prepare + " --output " + dir + "/c/train.h5").code, 0);
  EXPECT_TRUE(fs::is_regular_file(dir + "/c/train.val.h5"))
      << "the default validation file beside it";
  fs::create_directories(dir + "/taken.h5");
  expect_one_line_exit2(
      run(prepare + " --output " + dir + "/taken.h5"),
      "--output: cannot write " + dir + "/taken.h5: it is a directory; name a file");
  expect_one_line_exit2(
      run(prepare + " --output " + dir + "/d/train.h5 --val-output " + dir + "/taken.h5"),
      "--val-output: cannot write " + dir + "/taken.h5: it is a directory");
  EXPECT_FALSE(fs::exists(dir + "/d")) << "nothing made before the check";
}

// ---- item 5: non-finite losses ----

// The global batch of a 1-based step in epoch 0, from the sampler's pure functions.
std::vector<int64_t> batch_rows(int64_t step, int64_t batch) {
  data::TokenFile f(kDemo + "/train.h5");
  return data::global_batch(data::epoch_permutation(f.rows(), 1234, 0), batch,
                            (step - 1) * batch);  // from its first row
}

TEST(Nonfinite, StopNamesStepAndRowsOnEveryRankAlike) {
  const auto m = tmp("nan_stop.jsonl");
  auto r =
      run(kTrain + "--steps 6 --data " + kDemo + "/train.h5 --debug-nan 1:3 --metrics-file " + m,
          mpirun(2));
  EXPECT_EQ(r.code, 65) << r.out;
  EXPECT_EQ(count(r.out, "shardtrain: error: "), 1u) << r.out;
  EXPECT_NE(r.out.find("step 3: non-finite loss"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("gradient norm nan"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rows " + train::format_rows(batch_rows(3, 8)) + " of"), std::string::npos)
      << "the rows of the global batch (2 ranks x 4)\n"
      << r.out;
  const auto lines = read_jsonl(m);
  ASSERT_EQ(lines.size(), 3u) << "steps 1-3, then the stop";
  auto inf = run(kTrain + "--steps 6 --data " + kDemo + "/train.h5 --debug-nan 0:2:inf", mpirun(2));
  EXPECT_EQ(inf.code, 65) << inf.out;
  EXPECT_NE(inf.out.find("step 2: non-finite loss"), std::string::npos) << inf.out;
  EXPECT_NE(inf.out.find("gradient norm inf"), std::string::npos) << inf.out;
}

TEST(Nonfinite, SkipLeavesTheModelUntouchedAndCounts) {
  const auto skip = tmp("nan_skip.jsonl"), clean = tmp("nan_clean.jsonl");
  auto r = run(kTrain + "--steps 6 --data " + kDemo +
                   "/train.h5 --debug-nan 1:3 --on-nonfinite skip --metrics-file " + skip,
               mpirun(2));
  ASSERT_EQ(r.code, 0) << r.out;
  auto c =
      run(kTrain + "--steps 6 --data " + kDemo + "/train.h5 --metrics-file " + clean, mpirun(2));
  ASSERT_EQ(c.code, 0) << c.out;
  const auto s = read_jsonl(skip), k = read_jsonl(clean);
  ASSERT_EQ(s.size(), 6u);
  EXPECT_TRUE(s[2].value("skipped", false));
  EXPECT_EQ(s[1]["skipped_steps"], 0);
  EXPECT_EQ(s[5]["skipped_steps"], 1);
  // Steps 1-3 saw the same weights as the clean run (3's loss is from before its step); the
  // skipped update then makes step 4 differ, but it stays finite.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(s[i]["loss"], k[i]["loss"]) << "step " << i + 1;
  EXPECT_NE(s[3]["loss"], k[3]["loss"]);
  EXPECT_TRUE(std::isfinite(s[5]["loss"].get<double>()));
  auto n = run(kTrain + "--steps 20 --data " + kDemo +
                   "/train.h5 --debug-nan 0:0 --on-nonfinite skip --max-nonfinite-steps 3",
               mpirun(2));
  EXPECT_EQ(n.code, 65) << n.out;
  EXPECT_NE(n.out.find("step 3: non-finite"), std::string::npos) << n.out;
  EXPECT_NE(n.out.find("3 non-finite steps in a row (--max-nonfinite-steps 3)"), std::string::npos)
      << n.out;
}

// ---- item 4: SIGTERM and SIGINT ----

namespace {
// Starts a 2-rank run in the background, waits for its first metrics line (written after step 1,
// whatever --log-every), sends `sig` to `target` ("rank1": one rank's process, "mpirun": the
// launcher), and returns the exit code.
Result signalled_run(const std::string& args, const std::string& metrics, const std::string& sig,
                     const std::string& target) {
  fs::remove(metrics);
  const std::string tag = fs::path(metrics).stem().string();
  // mpirun is timeout's child: a TERM to timeout reaches mpirun twice (itself and its process
  // group), and a second signal makes Open MPI's mpirun exit at once without waiting for the ranks.
  const std::string pid = target == "mpirun"
                              ? "$(pgrep -P $pid)"
                              : "$(pgrep -f '^" + kBin + " train.*" + tag + "' | tail -1)";
  // mpirun passes a SIGTERM on odls_base_sigkill_timeout seconds after it gets one (1 s by
  // default), and SIGKILLs its ranks as long again later: 5 s lets the tiny model save.
  const std::string grace = target == "mpirun" ? "OMPI_MCA_odls_base_sigkill_timeout=5 " : "";
  return shell(grace + "timeout -s KILL 120 " + mpirun(2) + kBin + " " + kTrain + args +
               " --metrics-file " + metrics + " & pid=$!; for t in $(seq 600); do [ -s " + metrics +
               " ] && break; sleep 0.05; done; kill -" + sig + " " + pid +
               "; wait $pid; echo rc=$?");
}
}  // namespace

TEST(Signals, SigtermToOneRankCheckpointsEveryRankAndExits75) {
  const auto dir = tmp("term_ckpt"), m = tmp("term_one.jsonl");
  fs::remove_all(dir);
  auto r = signalled_run(
      "--steps 100000 --log-every 100000 --data " + kDemo + "/train.h5 --checkpoint-dir " + dir, m,
      "TERM", "rank1");
  EXPECT_NE(r.out.find("rc=75"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(SIGTERM)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("stopped by SIGTERM after a checkpoint; exiting with code 75"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("rc=76"), std::string::npos) << "not the collective watchdog\n" << r.out;
  const auto lines = read_jsonl(m);
  ASSERT_FALSE(lines.empty());
  const int64_t last = lines.back()["step"];
  std::string name;
  std::ifstream(dir + "/latest") >> name;
  EXPECT_EQ(name, "step-" + std::string(8 - std::to_string(last).size(), '0') +
                      std::to_string(last) + ".h5")
      << "the checkpoint is the last step that ran";
  auto resumed = run(kTrain + "--steps " + std::to_string(last + 1) + " --data " + kDemo +
                         "/train.h5 --checkpoint-dir " + dir + " --resume auto",
                     mpirun(2));
  EXPECT_EQ(resumed.code, 0) << resumed.out;
  EXPECT_NE(resumed.out.find("at step " + std::to_string(last)), std::string::npos) << resumed.out;
}

TEST(Signals, SigtermWithoutCheckpointsOrWithExitNosaveExits143) {
  auto r = signalled_run("--steps 100000 --log-every 100000 --data " + kDemo + "/train.h5",
                         tmp("term_none.jsonl"), "TERM", "rank1");
  EXPECT_NE(r.out.find("rc=143"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("stopped by SIGTERM without a checkpoint"), std::string::npos) << r.out;
  const auto dir = tmp("term_nosave");
  fs::remove_all(dir);
  r = signalled_run("--steps 100000 --log-every 100000 --data " + kDemo +
                        "/train.h5 --on-signal exit-nosave --checkpoint-dir " + dir,
                    tmp("term_nosave.jsonl"), "INT", "rank1");
  EXPECT_NE(r.out.find("rc=130"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir + "/latest")) << "exit-nosave writes no checkpoint";
}

// A bare mpirun given time to let the ranks save (docs/reliability.md). mpirun itself then exits
// 1, not the ranks' 75: launch/mpirun.sh relays USR2 instead (Launch.mpirun_sigterm).
TEST(Signals, SigtermToMpirunWithGraceCheckpoints) {
  const auto dir = tmp("term_mpirun");
  fs::remove_all(dir);
  auto r = signalled_run(
      "--steps 100000 --log-every 100000 --data " + kDemo + "/train.h5 --checkpoint-dir " + dir,
      tmp("term_mpirun.jsonl"), "TERM", "mpirun");
  EXPECT_EQ(r.out.find("rc=137"), std::string::npos) << "not killed by the timeout\n" << r.out;
  EXPECT_NE(r.out.find("stopped by SIGTERM after a checkpoint"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(dir + "/latest")) << r.out;
}
