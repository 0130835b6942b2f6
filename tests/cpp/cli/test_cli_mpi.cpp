// `shardtrain train` under mpirun, as users launch it: N ranks train the same model as 1 rank,
// bad layouts fail on every rank with exit 2, and one rank's failure ends the whole job fast.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "run_binary.h"
#include "shardtrain/io/h5.h"

using namespace testing_support;

namespace {
const std::string kDemo = std::string(SHARDTRAIN_TEST_TMP) + "/demo";
const std::string kTrain = "train --model tiny --threads 1 --data " + kDemo + "/train.h5 ";

std::string mpirun(int np) { return std::string(SHARDTRAIN_MPIEXEC) + std::to_string(np) + " "; }

}  // namespace

// The same global batch (8 rows x 2 micro-steps) on 1 rank and on 4 ranks as 2 nodes x 2.
TEST(CliMpi, FourRanksHybridTrainLikeOneRank) {
  const auto one = tmp("mpi_one.jsonl"), four = tmp("mpi_four.jsonl");
  auto a =
      run(kTrain + "--steps 15 --batch-size 8 --grad-accum 2 --metrics-file " + one, mpirun(1));
  ASSERT_EQ(a.code, 0) << a.out;
  auto b =
      run(kTrain +
              "--steps 15 --batch-size 2 --grad-accum 2 --sharding hybrid_shard --ranks-per-node 2 "
              "--activation-checkpointing --metrics-file " +
              four,
          mpirun(4));
  ASSERT_EQ(b.code, 0) << b.out;
  EXPECT_NE(b.out.find("topology    4 ranks on 2 nodes x 2 ranks per node"), std::string::npos)
      << b.out;
  EXPECT_NE(b.out.find("strategy    hybrid_shard: shard groups of 2, 2 replicas | param fp32"),
            std::string::npos)
      << "--param-dtype auto is fp32 on CPU\n"
      << b.out;
  const auto ra = read_jsonl(one), rb = read_jsonl(four);
  ASSERT_EQ(ra.size(), 15u);
  ASSERT_EQ(rb.size(), 15u);
  for (size_t i = 0; i < ra.size(); ++i) {
    const double la = ra[i]["loss"], lb = rb[i]["loss"];
    EXPECT_NEAR(la, lb, 1e-5 * la) << "step " << i + 1;
    EXPECT_EQ(ra[i]["tokens"], rb[i]["tokens"]);
  }
  // Hybrid: gathers and reduce-scatters inside the shard group, the shard all-reduced across
  // replicas.
  const auto& comm = rb.back()["comm"];
  EXPECT_GT(comm["shard"]["all_gather"]["bytes"].get<int64_t>(), 0);
  EXPECT_GT(comm["replicate"]["all_reduce"]["bytes"].get<int64_t>(), 0);
  EXPECT_FALSE(comm["replicate"].contains("all_gather"));
  const auto& mem = rb.back()["memory"];
  EXPECT_LT(mem["persistent_bytes"].get<int64_t>(),
            mem["unsharded_bytes"].get<int64_t>() / 2 + 4096);
}

TEST(CliMpi, LayoutsThatDoNotDivideExit2OnEveryRank) {
  auto r = run(kTrain + "--steps 2 --sharding hybrid_shard --shard-group-size 2", mpirun(3));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--shard-group-size 2 does not divide the 3 ranks"), std::string::npos)
      << r.out;
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

namespace {
// Runs steps 11..20 from the step-10 checkpoint and returns the largest relative loss gap to the
// uninterrupted run's steps 11..20, and how many of those losses were bit-identical.
std::pair<double, int> resume_gap(const std::string& ckpt, const std::vector<nlohmann::json>& whole,
                                  int np, int batch, const std::string& extra) {
  const auto metrics = tmp("resume_np" + std::to_string(np) + ".jsonl");
  auto r = run(kTrain + "--steps 20 --batch-size " + std::to_string(batch) + " --resume " + ckpt +
                   " --metrics-file " + metrics + " " + extra,
               mpirun(np));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("resumed from"), std::string::npos) << r.out;
  const auto part = read_jsonl(metrics);
  EXPECT_EQ(part.size(), 10u);
  double gap = 0;
  int identical = 0;
  for (size_t i = 0; i < part.size() && i + 10 < whole.size(); ++i) {
    const double a = whole[i + 10]["loss"], b = part[i]["loss"];
    EXPECT_EQ(part[i]["step"], whole[i + 10]["step"]);
    gap = std::max(gap, std::abs(a - b) / a);
    identical += a == b;
  }
  return {gap, identical};
}
}  // namespace

// 20 steps in one run against 10 + resume + 10, with the same global batch of 12 rows.
TEST(CliMpi, ResumeIsExactAtTheSameLayoutAndCloseAtAnyOther) {
  const auto dir = tmp("ckpt_resume"), metrics = tmp("resume_whole.jsonl");
  std::filesystem::remove_all(dir);
  auto r = run(kTrain + "--steps 20 --batch-size 3 --checkpoint-dir " + dir +
                   " --save-every 10 --keep-checkpoints 2 "
                   "--metrics-file " +
                   metrics,
               mpirun(4));
  ASSERT_EQ(r.code, 0) << r.out;
  const auto whole = read_jsonl(metrics);
  ASSERT_EQ(whole.size(), 20u);
  const std::string ckpt = dir + "/step-00000010.h5";
  ASSERT_TRUE(std::filesystem::exists(ckpt));
  std::ifstream latest(dir + "/latest");
  std::string name;
  latest >> name;
  EXPECT_EQ(name, "step-00000020.h5");
  auto inspect = run("inspect " + dir + "/" + name);
  EXPECT_EQ(inspect.code, 0) << inspect.out;
  EXPECT_NE(inspect.out.find("step 20 | loader epoch 0 row 240"), std::string::npos) << inspect.out;
  EXPECT_NE(inspect.out.find("global batch 12 rows (schedule in steps of 12 rows)"),
            std::string::npos)
      << inspect.out;
  EXPECT_NE(inspect.out.find("63 datasets, all checksums ok"), std::string::npos) << inspect.out;

  auto same = resume_gap(ckpt, whole, 4, 3, "");
  EXPECT_EQ(same.second, 10) << "same world size and strategy: bit for bit";
  auto hybrid = resume_gap(ckpt, whole, 4, 3, "--sharding hybrid_shard --ranks-per-node 2");
  EXPECT_LE(hybrid.first, 1e-6) << "full_shard -> hybrid_shard";
  auto two = resume_gap(ckpt, whole, 2, 6, "");
  EXPECT_LE(two.first, 1e-6) << "4 -> 2 ranks";
  auto three = resume_gap(ckpt, whole, 3, 4, "");
  EXPECT_LE(three.first, 1e-6) << "4 -> 3 ranks";
}

// One flipped byte inside a dataset fails that dataset's checksum, by name; auto-resume skips
// nothing here because the file still opens, so the error surfaces instead of silent garbage.
TEST(CliMpi, AFlippedByteIsCaughtByItsChecksum) {
  const auto dir = tmp("ckpt_corrupt");
  std::filesystem::remove_all(dir);
  ASSERT_EQ(run(kTrain + "--steps 2 --save-every 1 --checkpoint-dir " + dir, mpirun(2)).code, 0);
  const std::string ckpt = dir + "/step-00000002.h5";
  shardtrain::io::h5::Handle f = shardtrain::io::h5::open_file(ckpt);
  shardtrain::io::h5::Handle d = shardtrain::io::h5::open_dataset(f, "/model/lm_head.weight");
  const haddr_t offset = H5Dget_offset(d);
  ASSERT_NE(offset, HADDR_UNDEF);
  d.reset(), f.reset();
  {
    std::fstream io(ckpt, std::ios::in | std::ios::out | std::ios::binary);
    io.seekg(static_cast<std::streamoff>(offset + 1001));
    char c = 0;
    io.read(&c, 1);
    c ^= 0x20;
    io.seekp(static_cast<std::streamoff>(offset + 1001));
    io.write(&c, 1);
  }
  auto r = run(kTrain + "--steps 4 --resume " + ckpt, mpirun(2));
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("/model/lm_head.weight fails its CRC-32 check"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(ckpt), std::string::npos) << r.out;
  auto inspect = run("inspect " + ckpt);  // the tool agrees, tensor by tensor
  EXPECT_EQ(inspect.code, 1) << inspect.out;
  EXPECT_NE(inspect.out.find("/model/lm_head.weight"), std::string::npos);
  EXPECT_NE(inspect.out.find("CORRUPT"), std::string::npos) << inspect.out;
  EXPECT_NE(inspect.out.find("63 datasets, 1 FAILED"), std::string::npos) << inspect.out;
  // --resume auto skips the corrupt newest checkpoint, says so, and takes the one before it.
  auto a = run(kTrain + "--steps 2 --checkpoint-dir " + dir + " --resume auto", mpirun(2));
  EXPECT_EQ(a.code, 0) << a.out;
  EXPECT_NE(a.out.find("checkpoint " + ckpt + " (named by latest) cannot be loaded"),
            std::string::npos)
      << a.out;
  EXPECT_NE(a.out.find("falling back to " + dir + "/step-00000001.h5"), std::string::npos) << a.out;
  EXPECT_NE(a.out.find("resumed from " + dir + "/step-00000001.h5 at step 1"), std::string::npos)
      << a.out;
}

// Which checkpoint and which model, as a user types them: --resume auto takes `latest` (never a
// newer-named file of another run), a resumed run without --model takes the checkpoint's model,
// the directory or its `latest` stands for the checkpoint it names, and a new run never writes
// into another run's directory unless told to.
TEST(CliMpi, ResumeTakesLatestAndTheCheckpointsModel) {
  namespace fs = std::filesystem;
  const auto dir = tmp("ckpt_semantics"), export_dir = tmp("ckpt_semantics_hf"),
             fresh = tmp("ckpt_semantics_fresh");
  for (const auto& d : {dir, export_dir, fresh}) fs::remove_all(d);
  const std::string data = " --threads 1 --data " + kDemo + "/train.h5 ";
  auto a = run(
      "train --model tiny --n-layers 1" + data + "--steps 4 --save-every 2 --checkpoint-dir " + dir,
      mpirun(2));
  ASSERT_EQ(a.code, 0) << a.out;
  EXPECT_NE(
      a.out.find("training tiny from random initialization (seed 1234): no --weights was given"),
      std::string::npos)
      << a.out;
  EXPECT_NE(a.out.find("model not saved (--save-model DIR) | checkpoints " + dir),
            std::string::npos)
      << a.out;
  // A file `latest` does not name (another run's, in the report that found this) must not win.
  fs::copy_file(dir + "/step-00000004.h5", dir + "/step-00000040.h5");
  auto again = run("train --model tiny" + data + "--steps 6 --checkpoint-dir " + dir, mpirun(2));
  EXPECT_EQ(again.code, 2) << again.out;
  EXPECT_NE(again.out.find("--checkpoint-dir " + dir +
                           " already holds checkpoints of another run (latest: "
                           "step-00000004.h5); continue it with --resume auto"),
            std::string::npos)
      << again.out;
  EXPECT_FALSE(fs::exists(dir + "/step-00000006.h5")) << "refused before writing anything";
  // No --model: the checkpoint's one-layer model (the default preset's two layers would not load
  // it).
  auto resumed =
      run("train" + data + "--steps 6 --checkpoint-dir " + dir + " --resume auto", mpirun(2));
  ASSERT_EQ(resumed.code, 0) << resumed.out;
  EXPECT_NE(resumed.out.find("model configuration from checkpoint " + dir + "/step-00000004.h5"),
            std::string::npos)
      << resumed.out;
  EXPECT_NE(resumed.out.find("resumed from " + dir + "/step-00000004.h5 at step 4"),
            std::string::npos)
      << resumed.out;
  // The directory, or its `latest`, means the checkpoint `latest` names.
  for (const std::string& spec : {dir, dir + "/latest"}) {
    auto r = run("train" + data + "--steps 6 --resume " + spec, mpirun(1));
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("resumed from " + dir + "/step-00000006.h5 at step 6"), std::string::npos)
        << spec << r.out;
    auto i = run("inspect " + spec);
    EXPECT_EQ(i.code, 0) << i.out;
    EXPECT_NE(i.out.find("step 6 |"), std::string::npos) << spec << i.out;
  }
  auto c = run("convert --input " + dir + " --output " + export_dir, mpirun(2));
  ASSERT_EQ(c.code, 0) << c.out;
  EXPECT_NE(c.out.find("converted " + dir + "/step-00000006.h5 -> " + export_dir),
            std::string::npos)
      << c.out;
  // Fine-tuning with --resume auto in an empty directory says it starts from the weights.
  auto w = run("train" + data + "--steps 1 --weights " + export_dir + " --checkpoint-dir " + fresh +
                   " --resume auto",
               mpirun(2));
  ASSERT_EQ(w.code, 0) << w.out;
  EXPECT_NE(
      w.out.find("no checkpoint in " + fresh + " yet; starting from the weights in " + export_dir),
      std::string::npos)
      << w.out;
  EXPECT_EQ(w.out.find("random initialization"), std::string::npos) << w.out;
  // --overwrite-checkpoints replaces the earlier run's files, the one `latest` never named
  // included.
  auto o = run("train --model tiny" + data + "--steps 2 --checkpoint-dir " + dir +
                   " --overwrite-checkpoints",
               mpirun(2));
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_NE(o.out.find("files of an earlier run from " + dir + " (--overwrite-checkpoints)"),
            std::string::npos)
      << o.out;
  EXPECT_FALSE(fs::exists(dir + "/step-00000040.h5"));
  EXPECT_TRUE(fs::exists(dir + "/step-00000002.h5"));
  // Paths that mean nothing name the option the user typed.
  const std::string empty = tmp("ckpt_semantics_empty");
  fs::remove_all(empty), fs::create_directories(empty);
  for (const auto& [args, want] : std::vector<std::pair<std::string, std::string>>{
           {"inspect " + empty, "inspect: " + empty + " has no `latest` file"},
           {"convert --input " + empty + " --output " + export_dir + "2",
            "--input " + empty + " is neither"},
           {"train --model tiny" + data + "--resume " + empty,
            "--resume: " + empty + " has no `latest` file"},
           {"train --model tiny" + data + "--save-every 2",
            "--save-every needs --checkpoint-dir"}}) {
    auto r = run(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
    EXPECT_NE(r.out.find(want), std::string::npos) << args << "\n" << r.out;
    EXPECT_EQ(r.out.find("prepare"), std::string::npos)
        << "no advice about an option the user did not type:\n"
        << r.out;
  }
}

namespace {
const std::string kBin = SHARDTRAIN_BIN;
}  // namespace

// SIGUSR1 (what Slurm's --signal=B:USR1@secs sends) checkpoints at the next step boundary; with
// --on-signal exit the job ends with code 75, and --resume auto continues from that step.
TEST(CliMpi, Sigusr1CheckpointsThenExits75AndAutoResumes) {
  const auto dir = tmp("ckpt_signal");
  std::filesystem::remove_all(dir);
  const auto m =
      dir + ".jsonl";  // signal once training runs: a fixed sleep raced a slow start under load
  std::filesystem::remove(m);
  auto r = shell(
      mpirun(2) + kBin + " " + kTrain + "--steps 100000 --log-every 100000 --checkpoint-dir " +
      dir + " --on-signal exit --metrics-file " + m + " & pid=$!; for t in $(seq 1200); do [ -s " +
      m + " ] && break; sleep 0.05; done; kill -USR1 $pid; wait $pid; echo rc=$?");
  EXPECT_NE(r.out.find("rc=75"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(SIGUSR1)"), std::string::npos) << r.out;
  std::ifstream latest(dir + "/latest");
  std::string name;
  latest >> name;
  ASSERT_FALSE(name.empty()) << r.out;
  const int64_t step = std::stoll(name.substr(5, 8));
  EXPECT_GT(step, 0);
  auto resumed = run(kTrain + "--steps " + std::to_string(step + 2) + " --checkpoint-dir " + dir +
                         " --resume auto",
                     mpirun(2));
  EXPECT_EQ(resumed.code, 0) << resumed.out;
  EXPECT_NE(resumed.out.find("at step " + std::to_string(step)), std::string::npos) << resumed.out;
}

// kill -9 of every rank in each phase of a save, reached by watching the directory rather than
// by chance, while the job saves every step: after each, --resume auto (the next run's) must load
// the checkpoint `latest` names (its CRCs verified, no fallback) or, before the first one, find
// none.
TEST(CliMpi, KillNineDuringSavesAlwaysLeavesALoadableCheckpoint) {
  const auto dir = tmp("ckpt_crash");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string ranks = "pgrep -fc '^" + kBin + " train.*ckpt_crash'";
  // POSIX sh polls (popen's /bin/sh): a save's temporary file exists; `latest` names another file
  // than at launch (this run published a save).
  const std::string writing = "{ set -- " + dir + "/step-*.h5.tmp; [ -e \"$1\" ]; }";
  const std::string published =
      "{ { read now < " + dir + "/latest; } 2>/dev/null; [ \"$now\" != \"$before\" ]; }";
  const auto poll = [](const std::string& cond) {
    return "for t in $(seq 3000); do " + cond + " && echo fired && break; sleep 0.01; done; ";
  };
  struct Phase {
    const char* name;
    std::string wait;   // polls until the moment to kill at
    const char* delay;  // then this many seconds more
    bool saves = true;  // the run gets past its resume (it saves), so it checks the last kill
  };
  const std::vector<Phase> phases = {
      {"the first save, mid-write (no complete checkpoint yet)", poll(writing), "0"},
      {"a save mid-write, a complete one before it", poll(published) + poll(writing), "0"},
      {"a save's end: the write's sync and the renames", poll(published) + poll(writing), "0.15"},
      {"just published: retention removes the oldest", poll(published), "0"},
      {"the step after a save", poll(published), "0.05"},
      {"startup: LibTorch and MPI, before the resume", "echo fired; ", "0", false},
  };
  // What --resume auto must report given `latest` before the run: that file, or no checkpoint.
  const auto check_resume = [&](const std::string& out, const std::string& latest,
                                const std::string& after) {
    EXPECT_EQ(out.find("cannot be loaded"), std::string::npos)
        << "after a kill in " << after << "\n"
        << out;
    if (latest.empty())  // an unfinished first save is no checkpoint
      EXPECT_NE(out.find("no checkpoint in " + dir + " yet"), std::string::npos)
          << "after a kill in " << after << "\n"
          << out;
    else
      EXPECT_NE(out.find("resumed from " + dir + "/" + latest + " at step"), std::string::npos)
          << "after a kill in " << after << ": latest names " << latest << "\n"
          << out;
  };
  // The file --resume auto must load: the one `latest` names, or without `latest` (a kill between
  // a save's rename and its publication) the newest complete step file.
  const auto latest = [&] {
    std::string name;
    std::ifstream(dir + "/latest") >> name;
    if (name.empty())
      for (const auto& e : std::filesystem::directory_iterator(dir)) {
        const std::string f = e.path().filename().string();
        if (f.rfind("step-", 0) == 0 && e.path().extension() == ".h5" && f > name) name = f;
      }
    return name;
  };
  for (size_t i = 0; i < phases.size(); ++i) {
    const auto& p = phases[i];
    const std::string before = latest();
    // Kill only once both ranks exist: a rank killed while mpirun is still spawning the other
    // can leave mpirun waiting forever (seen once under load), which `timeout` also bounds.
    auto k =
        shell("{ read before < " + dir + "/latest; } 2>/dev/null; timeout -s KILL 120 " +
              mpirun(2) + kBin + " " + kTrain +
              "--steps 100000 --log-every 100000 --save-every 1 --keep-checkpoints 3 "
              "--checkpoint-dir " +
              dir +
              " --resume auto & pid=$!; "
              "for t in $(seq 400); do [ \"$(" +
              ranks + ")\" -ge 2 ] && break; sleep 0.05; done; " + p.wait + "sleep " + p.delay +
              "; pkill -9 -f '^" + kBin + " train.*ckpt_crash'; wait $pid; echo killed");
    ASSERT_NE(k.out.find("fired"), std::string::npos) << p.name << ": never reached\n" << k.out;
    ASSERT_NE(k.out.find("killed"), std::string::npos) << p.name << "\n" << k.out;
    if (p.saves) check_resume(k.out, before, i ? phases[i - 1].name : "none (an empty directory)");
  }
  // --steps 1: a resumed run has nothing left to train, so it only loads and verifies.
  const std::string before = latest();
  auto r = run(kTrain + "--steps 1 --checkpoint-dir " + dir + " --resume auto", mpirun(2));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_FALSE(before.empty()) << "no save completed in any run";
  check_resume(r.out, before, "startup (and, before it, the step after a save)");
}

// --async-save: the loop only copies shards; the checkpoints it writes in the background hold
// exactly what synchronous saves hold (compared by HDF5's own h5diff), and training is unchanged.
TEST(CliMpi, AsyncSaveWritesWhatSyncSaveWrites) {
  const auto as = tmp("ckpt_async"), ss = tmp("ckpt_sync");
  std::filesystem::remove_all(as), std::filesystem::remove_all(ss);
  const std::string args = "--steps 12 --save-every 4 --checkpoint-dir ";
  auto a = run(kTrain + args + as + " --async-save --metrics-file " + as + ".jsonl", mpirun(2));
  auto s = run(kTrain + args + ss + " --metrics-file " + ss + ".jsonl", mpirun(2));
  ASSERT_EQ(a.code, 0) << a.out;
  ASSERT_EQ(s.code, 0) << s.out;
  EXPECT_NE(a.out.find("started in the background; the loop was blocked"), std::string::npos)
      << a.out;
  const auto la = read_jsonl(as + ".jsonl"), ls = read_jsonl(ss + ".jsonl");
  ASSERT_EQ(la.size(), ls.size());
  for (size_t i = 0; i < la.size(); ++i)
    EXPECT_EQ(la[i]["loss"], ls[i]["loss"]) << "step " << i + 1;
  for (const char* step : {"step-00000004.h5", "step-00000008.h5", "step-00000012.h5"})
    for (const char* group : {"/model", "/exp_avg", "/exp_avg_sq"}) {
      auto d =
          shell("h5diff -q " + as + "/" + step + " " + ss + "/" + step + " " + group + " " + group);
      EXPECT_EQ(d.code, 0) << step << " " << group << ": " << d.out;
    }
}

namespace {
// The first JSON object eval prints (rank 0's result line).
nlohmann::json eval_json(const std::string& out) {
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("{\"", 0) == 0) return nlohmann::json::parse(line);
  return {};
}
}  // namespace

// eval and generate run through the FSDP engine: 4 ranks (full_shard, and hybrid as 2 nodes x 2)
// give 1 rank's loss and the same greedy tokens.
TEST(CliMpi, EvalAndGenerateAtFourRanksEqualOneRank) {
  const auto model = tmp("evalgen_model");
  auto t = run(kTrain + "--steps 40 --batch-size 16 --lr 3e-3 --save-model " + model, mpirun(1));
  ASSERT_EQ(t.code, 0) << t.out;
  const std::string eval =
      "eval --threads 1 --weights " + model + " --data " + kDemo + "/train.val.h5 --batch-size 8" +
      " --accuracy-file " + source("data/demo/val.jsonl") + " --tokenizer " +
      source("data/demo/tokenizer.model") + " --accuracy-samples 6 --max-new-tokens 6";
  auto one = run(eval, mpirun(1));
  ASSERT_EQ(one.code, 0) << one.out;
  const auto j1 = eval_json(one.out);
  ASSERT_TRUE(j1.contains("loss")) << one.out;
  for (const std::string layout :
       {"--sharding full_shard", "--sharding hybrid_shard --ranks-per-node 2"}) {
    auto four = run(eval + " " + layout, mpirun(4));
    ASSERT_EQ(four.code, 0) << four.out;
    const auto j4 = eval_json(four.out);
    ASSERT_TRUE(j4.contains("loss")) << four.out;
    EXPECT_NEAR(j4["loss"].get<double>(), j1["loss"].get<double>(), 1e-6 * j1["loss"].get<double>())
        << layout;
    EXPECT_EQ(j4["tokens"], j1["tokens"]) << layout;
    EXPECT_EQ(j4["correct"], j1["correct"]) << layout;
    // The decoded answers, in order: identical greedy tokens.
    const auto answers = [](const std::string& out) {
      return out.substr(std::min(out.size(), out.find("answer '")));
    };
    EXPECT_EQ(answers(four.out).substr(0, 200), answers(one.out).substr(0, 200)) << layout;
  }
  const std::string gen = "generate --threads 1 --weights " + model + " --tokenizer " +
                          source("data/demo/tokenizer.model") +
                          " --template alpaca --prompt 'Reverse the digits.' --alpaca-input '9 0 5 "
                          "3 1' --max-new-tokens 10";
  auto g1 = run(gen, mpirun(1)), g4 = run(gen + " --sharding full_shard", mpirun(4));
  ASSERT_EQ(g1.code, 0) << g1.out;
  ASSERT_EQ(g4.code, 0) << g4.out;
  const auto last_line = [](const std::string& out) {
    const auto end = out.find_last_not_of('\n');
    return out.substr(out.rfind('\n', end) + 1, end - out.rfind('\n', end));
  };
  EXPECT_EQ(last_line(g4.out), last_line(g1.out));
  EXPECT_FALSE(last_line(g1.out).empty());
}

// A checkpoint written by the build before the module split (tests/data/ckpt_v1, 2 ranks) loads
// at 1 rank and continues. Its losses against an outside reference (transformers and
// torch.optim.AdamW on the checkpoint's tensors): ctest ckpt_v1_transformers
// (tests/python/check_ckpt_v1.py).
TEST(CliMpi, CheckpointWrittenBeforeTheModuleSplitResumes) {
  const auto dir = tmp("ckpt_v1");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(source("tests/data/ckpt_v1/step-00000002.h5"),
                             dir + "/step-00000002.h5");
  const auto metrics = tmp("ckpt_v1.jsonl");
  auto r =
      run("train --threads 1 --model tiny --n-layers 2 --hidden-size 32 --intermediate-size 64 "
          "--n-heads 2 "
          "--n-kv-heads 1 --vocab-size 512 --data " +
              kDemo +
              "/train.h5 --steps 4 --batch-size 8 --lr 1e-3 "
              "--seed 7 --resume " +
              dir + "/step-00000002.h5 --metrics-file " + metrics,
          mpirun(1));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("resumed from " + dir + "/step-00000002.h5 at step 2"), std::string::npos)
      << r.out;
  const auto rows = read_jsonl(metrics);
  ASSERT_EQ(rows.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(rows[i]["step"].get<int>(), 3 + i);
    EXPECT_TRUE(std::isfinite(rows[i]["loss"].get<double>())) << rows[i].dump();
  }
}
