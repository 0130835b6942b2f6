// The checkpoint module's file-level logic, without MPI: names, publishing with `latest` and
// keep-N, the resume order, the CRC that each dataset stores (against zlib's crc32 directly),
// and the checkpoint options' validation.
#include <gtest/gtest.h>
#include <zlib.h>

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "shardtrain/ckpt/checkpoint.h"
#include "shardtrain/ckpt/checkpoint_attrs.h"
#include "shardtrain/ckpt/manager.h"
#include "shardtrain/ckpt/save_failure.h"
#include "shardtrain/io/h5.h"
#include "shardtrain/runtime/checksum.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/file_sync.h"
#include "test_paths.h"

using namespace shardtrain;
namespace fs = std::filesystem;

namespace {
std::string fresh_dir(const std::string& name) {
  const fs::path d = fs::path(SHARDTRAIN_TEST_TMP) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// What validate() says of a configuration; "" when it is accepted.
std::string message(const ckpt::CheckpointConfig& c) {
  try {
    c.validate();
  } catch (const runtime::UsageError& e) {
    return e.what();
  }
  return "";
}

// A finished save: write tmp, then publish it as step N.
void fake_save(const std::string& dir, int64_t step, int keep) {
  const std::string final_path = ckpt::step_path(dir, step);
  std::ofstream(final_path + ".tmp") << "step " << step;
  ckpt::publish(final_path + ".tmp", final_path, keep);
}
}  // namespace

TEST(CkptFiles, StepPathsSortByStep) {
  EXPECT_EQ(ckpt::step_path("/fsx/ck", 500), "/fsx/ck/step-00000500.h5");
  EXPECT_LT(ckpt::step_path("d", 99),
            ckpt::step_path("d", 100));  // zero-padded: names sort as numbers
}

TEST(CkptFiles, PublishPointsLatestAtTheNewestAndKeepsK) {
  const std::string dir = fresh_dir("ckpt_units_keep");
  for (int64_t s : {10, 20, 30, 40}) fake_save(dir, s, /*keep=*/2);
  EXPECT_EQ(slurp(fs::path(dir) / "latest"), "step-00000040.h5\n");
  EXPECT_FALSE(fs::exists(ckpt::step_path(dir, 10)));
  EXPECT_FALSE(fs::exists(ckpt::step_path(dir, 20)));
  EXPECT_TRUE(fs::exists(ckpt::step_path(dir, 30)));
  EXPECT_EQ(slurp(ckpt::step_path(dir, 40)), "step 40");
  EXPECT_FALSE(fs::exists(ckpt::step_path(dir, 40) + ".tmp"));
}

TEST(CkptFiles, ResumeTriesLatestThenOlderAndIgnoresUnfinishedSaves) {
  const std::string dir = fresh_dir("ckpt_units_resume");
  for (int64_t s : {5, 15, 10}) fake_save(dir, s, 0);
  std::ofstream(ckpt::step_path(dir, 20) + ".tmp") << "a save that never finished";
  std::ofstream(fs::path(dir) / "notes.h5") << "not a checkpoint name";
  const auto c = ckpt::resume_candidates("auto", dir);
  ASSERT_EQ(c.size(), 2u) << "latest (step 10, the last published) and the older one; never step "
                             "15, which latest does not name";
  EXPECT_EQ(c[0], ckpt::step_path(dir, 10));
  EXPECT_EQ(c[1], ckpt::step_path(dir, 5));
  EXPECT_EQ(ckpt::resume_candidates("/some/step-7.h5", dir),
            std::vector<std::string>{"/some/step-7.h5"});
  EXPECT_TRUE(ckpt::resume_candidates("auto", fresh_dir("ckpt_units_empty")).empty());
}

// --resume auto takes what `latest` names, even when a newer-named file lies beside it (another
// run's, or a save `latest` never named), and falls back only to older ones.
TEST(CkptFiles, ResumeAutoTakesLatestThenOnlyOlderOnes) {
  const std::string dir = fresh_dir("ckpt_units_latest");
  for (int64_t s : {5, 10, 40}) fake_save(dir, s, 0);
  std::ofstream(fs::path(dir) / "latest") << "step-00000010.h5\n";
  const auto c = ckpt::resume_candidates("auto", dir);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0], ckpt::step_path(dir, 10));
  EXPECT_EQ(c[1], ckpt::step_path(dir, 5));
  EXPECT_EQ(ckpt::latest_checkpoint(dir), ckpt::step_path(dir, 10));
  fs::remove(fs::path(dir) /
             "latest");  // no `latest` (an older layout): every checkpoint, newest first
  EXPECT_EQ(ckpt::resume_candidates("auto", dir).front(), ckpt::step_path(dir, 40));
  EXPECT_EQ(ckpt::latest_checkpoint(dir), "");
}

// A checkpoint as users type it: the file, the directory, or the directory's `latest`.
TEST(CkptFiles, ResolveTakesAFileADirectoryOrItsLatest) {
  const std::string dir = fresh_dir("ckpt_units_resolve");
  for (int64_t s : {2, 4}) fake_save(dir, s, 0);
  const std::string want = ckpt::step_path(dir, 4);
  EXPECT_EQ(ckpt::resolve_checkpoint(dir, "--resume"), want);
  EXPECT_EQ(ckpt::resolve_checkpoint(dir + "/", "--resume"), want);
  EXPECT_EQ(ckpt::resolve_checkpoint(dir + "/latest", "inspect"), want);
  EXPECT_EQ(ckpt::resolve_checkpoint(ckpt::step_path(dir, 2), "--resume"), ckpt::step_path(dir, 2));
  auto refusal = [](const std::string& spec, const std::string& opt) {
    try {
      ckpt::resolve_checkpoint(spec, opt);
    } catch (const runtime::UsageError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string empty = fresh_dir("ckpt_units_resolve_empty");
  EXPECT_EQ(refusal(empty, "--input"),
            "--input: " + empty +
                " has no `latest` file (no checkpoint was completed there); "
                "pass a checkpoint file such as " +
                ckpt::step_path(empty, 100));
  EXPECT_EQ(
      refusal(empty + "/latest", "--resume").rfind("--resume: " + empty + " has no `latest`", 0),
      0u);
  EXPECT_EQ(refusal("/nonexistent/step-1.h5", "--resume"),
            "--resume: /nonexistent/step-1.h5 does not exist");
  std::ofstream(fs::path(empty) / "latest") << "step-00000009.h5\n";
  EXPECT_NE(refusal(empty, "inspect").find("names step-00000009.h5, which does not exist"),
            std::string::npos);
  fs::remove(fs::path(dir) / "latest");  // an older layout without `latest`: the newest checkpoint
  EXPECT_EQ(ckpt::resolve_checkpoint(dir, "--resume"), want);
}

// keep-N prunes this run's history only: a newer-named file `latest` never named is left alone,
// and the checkpoint just published survives.
TEST(CkptFiles, KeepNeverRemovesWhatLatestNames) {
  const std::string dir = fresh_dir("ckpt_units_keep_foreign");
  fake_save(dir, 40, 0);
  fake_save(dir, 10, 0);
  fake_save(dir, 12, /*keep=*/1);
  EXPECT_EQ(slurp(fs::path(dir) / "latest"), "step-00000012.h5\n");
  EXPECT_TRUE(fs::exists(ckpt::step_path(dir, 12)));
  EXPECT_TRUE(fs::exists(ckpt::step_path(dir, 40)));
  EXPECT_FALSE(fs::exists(ckpt::step_path(dir, 10)));
}

TEST(CkptFiles, CrcIsZlibsOverTheCanonicalBytes) {
  auto t = at::arange(1000, at::kFloat).reshape({10, 100});
  const auto contiguous = t.contiguous();
  const uLong want = crc32(0L, reinterpret_cast<const Bytef*>(contiguous.data_ptr()), 4000);
  EXPECT_EQ(ckpt::crc_of(t), want);
  EXPECT_EQ(ckpt::crc_of(t.t().contiguous().t()), want)
      << "a strided view of the same values has the same CRC";
  auto changed = t.clone();
  changed[3][7] = 0.5f;
  EXPECT_NE(ckpt::crc_of(changed), want);
}

TEST(CkptConfig, BadValuesNameTheOption) {
  ckpt::CheckpointConfig ok;
  EXPECT_EQ(message(ok), "");
  ckpt::CheckpointConfig c = ok;
  c.resume = "auto";
  EXPECT_NE(message(c).find("--checkpoint-dir"), std::string::npos);
  c = ok;
  c.save_every = -1;
  EXPECT_NE(message(c).find("--save-every"), std::string::npos);
  c = ok;
  c.stripe.size = -4;
  EXPECT_NE(message(c).find("--ckpt-stripe-size"), std::string::npos);
  c = ok;
  c.resume = "/nonexistent/step-1.h5";
  EXPECT_NE(message(c).find("--resume"), std::string::npos);
  c = ok;
  c.save_every = 10;
  EXPECT_EQ(message(c), "--save-every needs --checkpoint-dir (where the checkpoints go)");
}

// A new run never writes into another run's checkpoints unless told to: its `latest` would move
// and a later --resume auto would continue the wrong run.
TEST(CkptConfig, ANewRunRefusesAnotherRunsCheckpointDirectory) {
  ckpt::CheckpointConfig c;
  c.dir = fresh_dir("ckpt_units_foreign");
  EXPECT_EQ(message(c), "") << "an empty directory is fine";
  fake_save(c.dir, 40, 0);
  EXPECT_EQ(message(c), "--checkpoint-dir " + c.dir +
                            " already holds checkpoints of another run (latest: "
                            "step-00000040.h5); continue it with --resume auto, pass a new "
                            "--checkpoint-dir, or replace "
                            "them with --overwrite-checkpoints");
  c.resume = "auto";
  EXPECT_EQ(message(c), "");
  c.resume = ckpt::step_path(c.dir, 40);
  EXPECT_EQ(message(c), "") << "resuming a file of the same directory continues that run";
  c.resume = "";
  c.overwrite = true;
  EXPECT_EQ(message(c), "");
  c.resume = "auto";
  EXPECT_NE(message(c).find("pass only one of them"), std::string::npos);
  EXPECT_EQ(ckpt::remove_checkpoints(c.dir), 2) << "the checkpoint and latest";
  EXPECT_FALSE(ckpt::holds_checkpoints(c.dir));
}

TEST(CkptFiles, AFailedSaveIsOneLineThatNamesAFullDiskAndWhatIsKept) {
  const auto full =
      ckpt::save_failure_message("/ck/step-00000004.h5", "HDF5 error: H5Dwrite: can't write data",
                                 1 << 20, 3 << 20, "step-00000002.h5");
  EXPECT_EQ(full,
            "checkpoint /ck/step-00000004.h5: the disk is full (1.0 MiB free in /ck, the "
            "checkpoint needs 3.0 MiB); "
            "step-00000002.h5 is intact and --resume auto will continue from it. Free space there "
            "or pass another "
            "--checkpoint-dir");
  const auto other =
      ckpt::save_failure_message("/ck/step-00000004.h5", "HDF5 error: boom", 10 << 20, 3 << 20, "");
  EXPECT_EQ(other,
            "checkpoint /ck/step-00000004.h5 could not be written (HDF5 error: boom); there is no "
            "earlier "
            "checkpoint. Check that --checkpoint-dir /ck is writable");
  EXPECT_EQ(other.find('\n'), std::string::npos);
}

TEST(CkptAttrs, RoundTripAndDamagedAttributesAreErrorsNamingTheFile) {
  const std::string path = fresh_dir("ckpt_attrs") + "/a.h5";
  ckpt::Values a;
  a.set_int("step", 7);
  a.set_int("adam_step", 7);
  a.set_int("world_size", 3);
  a.set_int("loader_epoch", 1);
  a.set_int("loader_step", 2);
  a.set_text("sharding", "full_shard");
  a.set_json("run_config", {{"args", {"--steps", "7"}}});
  a.set_json("model_config", {{"vocab_size", 512}});
  a.set_int("lora_rank", 8);
  a.set_real("lora_alpha", 16);
  a.set_real("lora_dropout", 0.05);
  a.set_text("lora_targets", "q_proj,v_proj");
  a.set_text("base_weights", "/m");
  a.set_int("base_crc32", 99);
  {
    io::h5::Handle f = io::h5::create_file(path);
    ckpt::write_values(f, a);
  }
  {
    io::h5::Handle f = io::h5::open_file(path);
    const auto b = ckpt::read_attrs(f, path);
    EXPECT_EQ(b.format_version, ckpt::kFormatVersion);
    EXPECT_EQ(b.step, 7);
    EXPECT_EQ(b.loader, (data::LoaderState{1, 2}));
    EXPECT_EQ(b.run_config, (nlohmann::json{{"args", {"--steps", "7"}}}));
    EXPECT_EQ(b.lora_targets, "q_proj,v_proj");
    EXPECT_EQ(b.base_crc32, 99);
    EXPECT_DOUBLE_EQ(b.lora_dropout, 0.05);
  }
  auto damaged = [&](const std::function<void(hid_t)>& damage, const std::string& want) {
    {
      io::h5::Handle f = io::h5::create_file(path);
      ckpt::write_values(f, a);
      damage(f);
    }
    io::h5::Handle f = io::h5::open_file(path);
    try {
      ckpt::read_attrs(f, path);
      ADD_FAILURE() << "accepted a file damaged for: " << want;
    } catch (const runtime::Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  };
  damaged(
      [](hid_t f) {
        H5Adelete(f, "run_config"), io::h5::write_attr(f, "run_config", std::string("{oops"));
      },
      "attribute run_config is not valid JSON");
  // An array attribute: H5Aread would have written 4 values into one int64 (a stack overflow
  // before).
  damaged(
      [](hid_t f) {
        H5Adelete(f, "step");
        const hsize_t n = 4;
        io::h5::Handle space(H5Screate_simple(1, &n, nullptr), H5Sclose);
        io::h5::Handle attr(H5Acreate2(f, "step", H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT),
                            H5Aclose);
      },
      "attribute step is not a single value");
  damaged(
      [](hid_t f) {
        H5Adelete(f, "format_version"), io::h5::write_attr(f, "format_version", int64_t{99});
      },
      "newer than this build's");
  damaged([](hid_t f) { H5Adelete(f, "step"), io::h5::write_attr(f, "step", int64_t{-3}); },
          "negative step");
}

// A state's values: typed getters whose errors name the file, the attribute and the state.
TEST(CkptValues, GettersNameTheFileTheAttributeAndThePiece) {
  ckpt::Values v;
  v.set_int("count", 3);
  v.set_real("ratio", 0.5);
  v.set_text("note", "{not json");
  const ckpt::Values saved = v.about("/ck/step-1.h5", "dummy");
  EXPECT_EQ(saved.get_int("count"), 3);
  EXPECT_DOUBLE_EQ(saved.get_real("count"), 3.0) << "an integer reads as a real";
  auto error = [&](const std::function<void()>& f) {
    try {
      f();
    } catch (const runtime::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error([&] { saved.get_int("missing"); }),
            "/ck/step-1.h5: attribute missing of state \"dummy\" is missing; the checkpoint is "
            "damaged or was saved without it");
  EXPECT_EQ(error([&] { saved.get_int("ratio"); }),
            "/ck/step-1.h5: attribute ratio of state \"dummy\" is not an integer; the checkpoint "
            "is damaged");
  EXPECT_NE(error([&] {
              saved.get_json("note");
            }).find("/ck/step-1.h5: attribute note is not valid JSON"),
            std::string::npos);
  ckpt::Values other;
  other.set_int("count", 4);
  EXPECT_NE(error([&] {
              v.merge(other, "twin");
            }).find("checkpoint state \"twin\" saves attribute count"),
            std::string::npos);
}

namespace {
// A value-only state: enough to see the registry's rules without MPI or files.
class Counter : public ckpt::Stateful {
 public:
  Counter(std::string name, std::string key) : name_(std::move(name)), key_(std::move(key)) {}
  std::string name() const override { return name_; }
  void save_values(ckpt::Values& out) const override { out.set_int(key_, 1); }

 private:
  std::string name_, key_;
};
}  // namespace

TEST(CkptRegistry, NamesAndAttributesBelongToOnePiece) {
  ckpt::StateRegistry reg;
  reg.emplace<Counter>("a", "x");
  EXPECT_THROW(reg.emplace<Counter>("a", "y"), runtime::Error) << "two states of one name";
  reg.emplace<Counter>("b", "y");
  EXPECT_EQ(reg.snapshot(false).values.entries().size(), 2u);
  reg.emplace<Counter>("c", "x");
  EXPECT_THROW(reg.snapshot(false), runtime::Error) << "two states saving one attribute";
}

// The root attributes of a checkpoint written before the state registry existed read as before.
TEST(CkptAttrs, AVersion1CheckpointReads) {
  const std::string path =
      std::string(SHARDTRAIN_SOURCE_DIR) + "/tests/data/ckpt_v1/step-00000002.h5";
  const auto a = ckpt::read_attrs(path);
  EXPECT_EQ(a.format_version, 1);
  EXPECT_EQ(a.step, 2);
  EXPECT_EQ(a.adam_step, 2);
  EXPECT_EQ(a.world_size, 2);
  EXPECT_EQ(a.sharding, "full_shard");
  EXPECT_EQ(a.model_config.value("num_hidden_layers", 0), 2);
  EXPECT_EQ(a.lora_rank, 0);
}

TEST(Checksum, Crc32MatchesTheKnownCheckValueAndContinues) {
  // CRC-32 (ISO-HDLC, zlib's) of "123456789" is 0xCBF43926: the catalogue's check value.
  const std::string s = "123456789";
  EXPECT_EQ(runtime::crc32_bytes(s.data(), s.size()), 0xCBF43926u);
  EXPECT_EQ(runtime::crc32_bytes(s.data() + 4, 5, runtime::crc32_bytes(s.data(), 4)), 0xCBF43926u);
  EXPECT_EQ(runtime::crc32_bytes(nullptr, 0), 0u);
}

TEST(FileSync, AMissingFileIsAnErrorNamingItAndBestEffortSaysSo) {
  const std::string missing = "/nonexistent-dir/shardtrain-sync-test";
  try {
    runtime::sync_file(missing);
    FAIL() << "sync_file should throw";
  } catch (const runtime::Error& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
  EXPECT_FALSE(runtime::sync_best_effort(missing));
  EXPECT_TRUE(runtime::sync_best_effort("/tmp"));
}
