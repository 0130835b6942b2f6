// A state the checkpoint code has never heard of, registered through Stateful: its
// sharded tensors and its values round-trip through a parallel save and load at any world size,
// a background save writes the state of the moment it was taken, and a file saved without the
// state is an error naming it. Run under mpirun at several world sizes.
#include <gtest/gtest.h>
#include <mpi.h>

#include <ATen/ATen.h>

#include <filesystem>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "shardtrain/ckpt/checkpoint.h"
#include "shardtrain/io/h5.h"
#include "shardtrain/runtime/error.h"
#include "test_paths.h"

using namespace shardtrain;

namespace {

int g_rank = 0;
int g_world = 1;

// This rank's even share of n elements: [begin, end).
std::pair<int64_t, int64_t> share(int64_t n) {
  const int64_t per = (n + g_world - 1) / g_world;
  const int64_t b = std::min<int64_t>(n, per * g_rank);
  return {b, std::min<int64_t>(n, b + per)};
}

// A 2-D tensor [5, 7] and a 1-D one [7], split over the ranks at row-crossing offsets, plus a
// counter and a JSON note.
class Dummy : public ckpt::Stateful {
 public:
  explicit Dummy(float base) {
    const auto [wb, we] = share(35);
    const auto [bb, be] = share(7);
    w_ = at::arange(wb, we, at::kFloat) + base;
    b_ = at::arange(bb, be, at::kFloat) * -1 + base;
    w_begin_ = wb;
    b_begin_ = bb;
  }
  std::string name() const override { return "dummy"; }
  std::vector<ckpt::TensorGroup> tensors() override {
    ckpt::TensorGroup g{"dummy", {{"w", {5, 7}}, {"bias", {7}}}, {}};
    if (w_.numel() > 0) g.slices.push_back({"w", w_begin_, w_.numel(), w_});
    if (b_.numel() > 0) g.slices.push_back({"bias", b_begin_, b_.numel(), b_});
    return {g};
  }
  void save_values(ckpt::Values& out) const override {
    out.set_int("dummy_count", count);
    out.set_json("dummy_note", note);
  }
  void load_values(const ckpt::Values& saved) override {
    count = saved.get_int("dummy_count");
    note = saved.get_json("dummy_note");
  }
  at::Tensor w_, b_;
  int64_t w_begin_ = 0;
  int64_t b_begin_ = 0;
  int64_t count = 0;
  nlohmann::json note;
};

// Values only: what the file must hold for a load to restore it.
class DummyValues : public ckpt::Stateful {
 public:
  std::string name() const override { return "dummy_values"; }
  void save_values(ckpt::Values& out) const override { out.set_int("dummy_values_n", n); }
  void load_values(const ckpt::Values& saved) override { n = saved.get_int("dummy_values_n"); }
  int64_t n = 0;
};

ckpt::Ranks ranks() {
  ckpt::Ranks r;
  r.shard_rank = g_rank;
  return r;
}

std::string path_for(const std::string& name) {
  return std::string(SHARDTRAIN_TEST_TMP) + "/ckpt_state_" + name + "_w" + std::to_string(g_world) +
         ".h5";
}

// What load throws, agreed by every rank; "" when it succeeds.
std::string load_error(const std::string& path, ckpt::StateRegistry& reg) {
  try {
    ckpt::load(path, reg);
  } catch (const runtime::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(CkptState, ANewPieceRoundTripsWithoutChangesToTheFormat) {
  const std::string path = path_for("roundtrip");
  ckpt::StateRegistry saved(ranks());
  auto& a = saved.emplace<Dummy>(100.0f);
  a.count = 41;
  a.note = {{"k", "v"}, {"n", 2}};
  ckpt::write(path, MPI_COMM_WORLD, saved.snapshot(/*copy=*/false));
  ckpt::StateRegistry loaded(ranks());
  auto& b = loaded.emplace<Dummy>(0.0f);
  b.w_.zero_();
  b.b_.zero_();
  ASSERT_EQ(load_error(path, loaded), "");
  EXPECT_TRUE(at::equal(b.w_, a.w_));
  EXPECT_TRUE(at::equal(b.b_, a.b_));
  EXPECT_EQ(b.count, 41);
  EXPECT_EQ(b.note, a.note);
  if (g_rank == 0) {  // the whole dataset in logical shape, with the CRC-32 of its row-major bytes
    std::lock_guard<std::recursive_mutex> lock(io::h5::library_lock());
    io::h5::Handle f = io::h5::open_file(path);
    io::h5::Handle d = io::h5::open_dataset(f, "/dummy/w");
    EXPECT_EQ(io::h5::dataset_shape(d), (std::vector<hsize_t>{5, 7}));
    EXPECT_EQ(io::h5::read_attr_int(d, "crc32"),
              static_cast<int64_t>(ckpt::crc_of(at::arange(35, at::kFloat) + 100.0f)));
    EXPECT_EQ(io::h5::read_attr_int(f, "format_version"), ckpt::kFormatVersion);
  }
}

// A background save writes host copies taken at the step boundary, not what training did after.
TEST(CkptState, ASnapshotCopyKeepsTheStateOfItsMoment) {
  const std::string path = path_for("copy");
  ckpt::StateRegistry live(ranks());
  auto& a = live.emplace<Dummy>(5.0f);
  a.count = 1;
  const ckpt::Snapshot snap = live.snapshot(/*copy=*/true);
  const at::Tensor before = a.w_.clone();
  a.w_.add_(1000.0f);
  a.count = 2;
  ckpt::write(path, MPI_COMM_WORLD, snap);
  ckpt::StateRegistry loaded(ranks());
  auto& b = loaded.emplace<Dummy>(0.0f);
  ASSERT_EQ(load_error(path, loaded), "");
  EXPECT_TRUE(at::equal(b.w_, before));
  EXPECT_EQ(b.count, 1);
}

// Decided behaviour: a file that lacks a registered state's state is an error naming the state
// (a state that wants a default asks has() itself, as the LoRA settings do).
TEST(CkptState, AFileWithoutAPiecesStateIsAnErrorNamingIt) {
  const std::string path = path_for("without");
  ckpt::StateRegistry old_run(ranks());
  old_run.emplace<DummyValues>().n = 3;
  ckpt::write(path, MPI_COMM_WORLD, old_run.snapshot(false));

  ckpt::StateRegistry with_tensors(ranks());
  with_tensors.emplace<DummyValues>();
  with_tensors.emplace<Dummy>(0.0f);
  const std::string e1 = load_error(path, with_tensors);
  EXPECT_NE(e1.find(path + " holds no tensors of state \"dummy\" (no group /dummy)"),
            std::string::npos)
      << e1;

  ckpt::StateRegistry with_values(ranks());
  auto& v = with_values.emplace<DummyValues>();
  ASSERT_EQ(load_error(path, with_values), "");
  EXPECT_EQ(v.n, 3);
  ckpt::StateRegistry renamed(ranks());
  class Other : public DummyValues {
    std::string name() const override { return "other"; }
    void load_values(const ckpt::Values& saved) override { saved.get_int("other_n"); }
  };
  renamed.emplace<Other>();
  const std::string e2 = load_error(path, renamed);
  EXPECT_NE(e2.find(path + ": attribute other_n of state \"other\" is missing"), std::string::npos)
      << e2;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_world);
  ::testing::InitGoogleTest(&argc, argv);
  std::filesystem::create_directories(SHARDTRAIN_TEST_TMP);
  const int rc = RUN_ALL_TESTS();
  int worst = rc;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
