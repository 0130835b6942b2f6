// The FSDP engine under mpirun against the single-rank trainer (torchtitan's loss-comparison
// idea): every strategy, with and without activation checkpointing and gradient accumulation,
// must give the same losses and final weights. Also the exact bytes each strategy moves, the
// per-rank memory, and sharded loading.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>

#include "mpi_gtest_main.h"
#include "oracle/from_root.h"
#include "oracle/trainer.h"
#include "sft_step.h"
#include "shardtrain/data/prepare.h"
#include "shardtrain/data/sampler.h"
#include "shardtrain/data/token_file.h"
#include "shardtrain/fsdp/engine.h"
#include "shardtrain/model/fp8.h"
#include "shardtrain/runtime/mpi_env.h"
#include "test_paths.h"

using namespace shardtrain;
using comm::Op;
using fsdp::Sharding;

namespace {
runtime::MpiEnv* g_env = nullptr;
// Eight steps: the gradient norm, compared at every step, sees a wrong gradient scale or
// normalisation at the first; the weights after eight AdamW steps see the optimizer's state.
constexpr int64_t kGlobalRows = 8, kSeq = 24, kSteps = 8;
constexpr uint64_t kSeed = 5;
// --fp8 at a layout against one rank. Float8 amplifies a summation-order difference: a value
// tipped across a rounding tie moves by 1/8 (e4m3) or 1/4 (e5m2) of itself and the change spreads.
// So the fp8 cases take the unfused loss, as the single-rank trainer does (the chunked loss's sums
// tipped ties on an AMD EPYC (AVX2) machine, not on earlier ones), and step 1 is the same
// computation on every rank: its gradient norm within fp32's 1e-5. Step 2 starts from weights that
// differ by the reductions' order, and AdamW turns a changed near-zero gradient into a full
// lr-sized move: the losses within kFp8Layouts, the weights after two steps within kFp8Params
// (measured up to 4.7e-3, at 4 ranks; a wrong scale or layout moves losses by the float8-vs-fp32
// gap, 3e-4 to 1e-3).
constexpr double kFp8Layouts = 1e-4, kFp8Params = 1e-2;

// The tiny preset with 514 tokens: at a shard group of 3 (or 6) no unit's flat size divides, so
// every unit is padded and the padding path is compared with one rank (expect_padded checks it).
model::ModelConfig tiny() {
  model::ModelConfig m = model::model_preset("tiny");
  m.vocab_size = 514;
  return m;
}

// The step's global batch, identical on every rank; some labels masked like a prompt.
model::Batch global_batch(int64_t step) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1000 + step);
  auto t = at::randint(3, 512, {kGlobalRows, kSeq}, gen, at::kLong);
  auto labels = t.clone();
  labels.narrow(1, 0, 5).fill_(-100);
  labels[3].narrow(0, 10, kSeq - 10).fill_(-100);
  return {t, labels};
}

std::vector<model::Batch> take(const model::Batch& b,
                               const std::vector<std::vector<int64_t>>& parts) {
  std::vector<model::Batch> out;
  for (const auto& p : parts) {
    auto idx = at::tensor(p, at::kLong);
    out.push_back({b.tokens.index_select(0, idx), b.labels.index_select(0, idx)});
  }
  return out;
}

std::vector<int64_t> all_rows() {
  std::vector<int64_t> r(kGlobalRows);
  for (int64_t i = 0; i < kGlobalRows; ++i) r[i] = i;
  return r;
}

struct Case {
  Sharding sharding = Sharding::kFullShard;
  int shard_group_size = 0;
  bool ac = false;
  int64_t accum = 1;
  at::ScalarType dtype = at::kFloat;
  bool sync = true;
  model::ModelConfig model = tiny();
  bool fused = false;  // --fused-layers: on CPU the fused RMSNorm and the merged matmuls
  model::Fp8Mode fp8 = model::Fp8Mode::kOff;  // --fp8: on CPU the emulated float8 GEMMs
  bool offload = false;  // --cpu-offload: on CPU separate host buffers, copied all the same
  double clip = 1.0;     // the global-norm clip; 0: none, and offload's AdamW steps armed
};

// Qwen2's shape in small: q/k/v biases, the head tied to the embedding, the second layer sliding.
model::ModelConfig tiny_qwen2() {
  model::ModelConfig m = tiny();
  m.model_type = "qwen2";
  m.tie_word_embeddings = true;
  m.sliding_window = 8;
  m.sliding_layers = {false, true};
  return m;
}

// Llama with every bias and a tied head.
model::ModelConfig tiny_biased_tied() {
  model::ModelConfig m = tiny();
  m.attention_bias = m.mlp_bias = true;
  m.tie_word_embeddings = true;
  return m;
}

std::string describe(const Case& c) {
  return std::string(fsdp::sharding_name(c.sharding)) +
         " sgs=" + std::to_string(c.shard_group_size) + " ac=" + std::to_string(c.ac) +
         " accum=" + std::to_string(c.accum) + " dtype=" + c10::toString(c.dtype) +
         " sync=" + std::to_string(c.sync) + " world=" + std::to_string(g_env->size()) +
         (c.model.model_type == "llama" ? "" : " " + c.model.model_type) +
         (c.model.tie_word_embeddings ? " tied" : "") + (c.fused ? " fused" : "") +
         (c.fp8 != model::Fp8Mode::kOff ? std::string(" fp8=") + model::fp8_mode_name(c.fp8) : "") +
         (c.offload ? " offload" : "") + (c.clip != 1.0 ? " clip=" + std::to_string(c.clip) : "");
}

test_steps::EngineOptions fsdp_config(const Case& c) {
  test_steps::EngineOptions f;
  f.sharding = c.sharding;
  f.activation_checkpointing.mode = c.ac ? fsdp::Recompute::kFull : fsdp::Recompute::kNone;
  f.param_dtype = c.dtype;
  f.no_sync_accumulation = !c.sync;
  f.fused_layers = c.fused;
  f.fp8 = c.fp8;
  f.cpu_offload = c.offload;
  if (c.fp8 != model::Fp8Mode::kOff) f.loss_chunk = -1;  // the trainer's loss: kFp8Layouts says why
  return f;
}

optim::OptimizerConfig optim_config(double clip = 1.0) {
  optim::OptimizerConfig o;
  // Adam's update is lr * g / (sqrt(v) + eps). An element whose gradient is pure summation-order
  // noise (|g| ~ 1e-9, sign arbitrary) moves by up to lr * |g| / eps, so with eps = 1e-8 a
  // different (sharded) summation order alone moved one embedding element by 8e-4 in 20 steps
  // while every loss agreed to 2e-6; eps = 1e-6 still left 1.1e-5. eps = 1e-5 bounds it 1000x
  // lower, which is what a comparison at 1e-5 needs.
  o.adamw.eps = 1e-5;
  o.grad_clip = clip;
  return o;
}

// The engine and its optimizer component: one training step as train's loop takes it (without
// clipping, offload's per-unit AdamW steps armed before the backward pass, as fit.cpp does).
struct Stepper {
  fsdp::FsdpEngine& eng;
  optim::Optimizer opt;
  double grad_norm = 0;  // the last step's, before clipping: what a wrong gradient scale moves
  explicit Stepper(fsdp::FsdpEngine& e, double clip = 1.0)
      : eng(e), opt(fsdp::make_optimizer(e, optim_config(clip))) {}
  fsdp::GradResult step(const std::vector<model::Batch>& micro, double lr) {
    if (opt.can_arm()) opt.arm(lr, eng.grad_shards());
    const fsdp::GradResult g = test_steps::sft_step(eng, micro);
    if (const fsdp::HostOffload* h = eng.schedule().offload())
      EXPECT_EQ(h->armed_jobs(), 0u) << "every armed unit's step started in the backward";
    grad_norm = opt.step(lr, eng.grad_shards());
    eng.release_grads();
    return g;
  }
};

// AdamW normalises the gradient, so losses and weights see a wrong gradient scale only through
// eps and clipping; the gradient norm sees it at once.
struct Gaps {
  double loss = 0;        // worst relative loss gap over the steps
  double grad = 0;        // worst relative gap of the pre-clip gradient norm over the steps
  double grad_first = 0;  // the same at the first step, from the same weights
  double param = 0;       // worst absolute element gap in the final parameters
  double param_rel = 0;   // worst ||difference|| / ||parameter|| over the tensors
};

double rel_gap(double got, double want) { return std::abs(got - want) / std::abs(want); }

// The seeded init with non-zero biases (theirs is zero, which would test little), written by
// rank 0 to a file that the engine reads shard by shard and the single-rank trainer whole.
std::string start_weights(const model::ModelConfig& m) {
  const std::string path = std::string(SHARDTRAIN_TEST_TMP) + "/fsdp_start_" + m.model_type +
                           (m.attention_bias ? "_bias" : "") +
                           (m.tie_word_embeddings ? "_tied" : "") + "_w" +
                           std::to_string(g_env->size()) + ".safetensors";
  if (g_env->rank() == 0) {
    model::ParamStore init = model::ParamStore::initialize(m, kSeed);
    for (size_t i = 0; i < init.specs().size(); ++i) {
      if (!init.specs()[i].is_bias) continue;
      model::ParamSpec drawn = init.specs()[i];
      drawn.is_bias = false;
      init.tensors()[i].detach().copy_(model::init_param(drawn, kSeed, 0.5));
    }
    std::filesystem::create_directories(SHARDTRAIN_TEST_TMP);
    io::write_safetensors(path, init.named());
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return path;
}

// Where the shard group is a multiple of 3, every unit of these models ends in padding: the
// comparison covers it and cannot silently stop covering it if the models change.
void expect_padded(fsdp::FsdpEngine& eng, const comm::ParallelDims& groups,
                   const std::string& what) {
  if (groups.shard->size() % 3 != 0) return;
  for (auto& u : eng.schedule().units())
    EXPECT_NE(u.layout().numel % groups.shard->size(), 0)
        << what << ": a unit of " << u.layout().numel << " elements divides evenly";
  EXPECT_GT(eng.memory().report().padding_elements, 0) << what;
}

// The single-rank trainer's micro-batches: the whole batch's rows in `accum` parts. Float8 scales
// come from each micro-batch's amax, so with --fp8 it takes every rank's micro-batches, as they
// are, one after another: the same scales, the same products.
std::vector<std::vector<int64_t>> oracle_micro_batches(const Case& c, int world) {
  if (c.fp8 == model::Fp8Mode::kOff) return data::rank_micro_batches(all_rows(), 0, 1, c.accum);
  std::vector<std::vector<int64_t>> all;
  for (int r = 0; r < world; ++r)
    for (auto& m : data::rank_micro_batches(all_rows(), r, world, c.accum)) all.push_back(m);
  return all;
}

// Runs the case against the single-rank Trainer.
Gaps compare(const Case& c, int64_t steps = kSteps) {
  auto groups = fsdp::make_mpi_groups(c.sharding, g_env->topology(), c.shard_group_size);
  const std::string start = start_weights(c.model);
  io::SafetensorsModel weights(start);
  fsdp::FsdpEngine eng(test_steps::spec(c.model, fsdp_config(c)), groups, kSeed, &weights);
  expect_padded(eng, groups, describe(c));
  EXPECT_EQ(eng.schedule().offload() != nullptr, c.offload) << describe(c);
  Stepper run(eng, c.clip);
  // Without clipping, offload arms the steps: each unit's AdamW runs during the backward pass.
  if (c.offload) EXPECT_EQ(run.opt.can_arm(), c.clip == 0) << describe(c);
  oracle::TrainConfig tc;
  tc.param_dtype = c.dtype;
  tc.adamw = optim_config().adamw;
  tc.grad_clip = c.clip;
  tc.fp8 = c.fp8;
  const int rank = g_env->rank(), world = g_env->size();
  std::optional<oracle::Trainer> ref;  // rank 0's alone (oracle/from_root.h)
  if (rank == 0) ref.emplace(c.model, tc, model::ParamStore::load(c.model, weights));
  Gaps g;
  for (int64_t s = 0; s < steps; ++s) {
    const model::Batch b = global_batch(s);
    const double lr = 3e-3;
    const auto mine =
        run.step(take(b, data::rank_micro_batches(all_rows(), rank, world, c.accum)), lr);
    const auto want = oracle::from_root(ref ? ref->step(take(b, oracle_micro_batches(c, world)), lr)
                                            : oracle::StepResult{});
    EXPECT_EQ(mine.tokens, want.tokens);
    g.loss = std::max(g.loss, rel_gap(mine.loss, want.loss));
    g.grad = std::max(g.grad, rel_gap(run.grad_norm, want.grad_norm));
    if (s == 0) g.grad_first = g.grad;
  }
  if (c.offload) run.opt.settle();
  const auto full = eng.full_parameters();
  if (ref) {
    EXPECT_EQ(run.opt.adamw().step_count(), ref->optimizer().step_count()) << describe(c);
    for (const auto& [name, t] : ref->params().named()) {
      const auto d = full.at(name) - t.detach();
      g.param = std::max(g.param, d.abs().max().item<double>());
      g.param_rel =
          std::max(g.param_rel, d.norm().item<double>() / t.detach().norm().item<double>());
    }
  }
  g.param = oracle::from_root(g.param);
  g.param_rel = oracle::from_root(g.param_rel);
  return g;
}

void expect_equivalent(const Case& c, int64_t steps = kSteps) {
  const Gaps g = compare(c, steps);
  EXPECT_LE(g.loss, 1e-5) << describe(c);
  EXPECT_LE(g.grad, 1e-5) << describe(c);
  EXPECT_LE(g.param, 1e-5) << describe(c);
  if (g_env->rank() == 0)
    std::printf("  %-64s loss rel %.1e, grad norm rel %.1e, param abs %.1e\n", describe(c).c_str(),
                g.loss, g.grad, g.param);
}

std::vector<Sharding> strategies() {
  return {Sharding::kFullShard, Sharding::kShardGradOp, Sharding::kNoShard, Sharding::kHybridShard,
          Sharding::kHybridShardZero2};
}
}  // namespace

TEST(FsdpMpi, EveryStrategyEqualsSingleRankTraining) {
  for (Sharding s : strategies()) {
    expect_equivalent({s, 0, /*ac=*/false, /*accum=*/1});
    expect_equivalent({s, 0, /*ac=*/true, /*accum=*/4});
  }
}

namespace {
// One tied matrix (the embedding's and the head's gradients summed into one shard) and biases
// (sharded, reduced, stepped like weights) give single-rank training under every strategy.
void expect_every_strategy_equivalent(const model::ModelConfig& m) {
  for (Sharding s : strategies()) {
    Case c{s, 0, /*ac=*/false, /*accum=*/1};
    c.model = m;
    expect_equivalent(c);
    c.ac = true;
    c.accum = 4;
    c.sync = s == Sharding::kShardGradOp;  // and no_sync accumulation once
    expect_equivalent(c);
  }
}
}  // namespace

// Two tests, not one, so that ctest can run each model at a layout as its own short entry.
TEST(FsdpMpi, TiedQwen2UnderEveryStrategy) { expect_every_strategy_equivalent(tiny_qwen2()); }
TEST(FsdpMpi, TiedBiasedLlamaUnderEveryStrategy) {
  expect_every_strategy_equivalent(tiny_biased_tied());
}

// Packing without cross-document attention: the same samples packed (several per row, positions
// restarting, attention within each sample) and padded (one per row) give the same token-weighted
// loss and the same gradients, through real token files, with and without sliding windows.
TEST(FsdpMpi, PackedRowsTrainWhatPaddedRowsTrain) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(77);
  std::vector<data::Sample> samples;
  for (int i = 0; i < 24; ++i) {
    const int64_t n =
        2 + at::randint(0, 9, {1}, gen, at::kLong).item<int64_t>();  // 2..10 tokens, rows of 24
    const auto ids = at::randint(3, 512, {n}, gen, at::kInt);
    data::Sample s;
    s.ids.assign(ids.data_ptr<int32_t>(), ids.data_ptr<int32_t>() + n);
    s.mask.assign(n, 1);
    if (i % 2)
      std::fill(s.mask.begin(), s.mask.begin() + n / 3,
                0);  // a prompt outside the loss; else every token in it
    samples.push_back(s);
  }
  const std::string dir =
      std::string(SHARDTRAIN_TEST_TMP) + "/packing_w" + std::to_string(g_env->size());
  if (g_env->rank() == 0) {
    std::filesystem::create_directories(dir);
    for (const bool packing : {true, false}) {
      data::TokenFileMeta meta;
      meta.packing = packing ? "packing" : "padding";
      data::write_token_file(dir + (packing ? "/packed.h5" : "/padded.h5"),
                             data::make_rows(samples, kSeq, packing, 0), meta);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const data::TokenFile packed(dir + "/packed.h5"), padded(dir + "/padded.h5");
  ASSERT_LT(packed.rows(), padded.rows() / 2) << "several samples share a packed row";
  auto all = [](const data::TokenFile& f) {
    std::vector<int64_t> rows(f.rows());
    for (int64_t i = 0; i < f.rows(); ++i) rows[i] = i;
    return f.read(rows);
  };
  for (const model::ModelConfig& m : {tiny(), tiny_qwen2()}) {
    auto groups = fsdp::make_mpi_groups(Sharding::kFullShard, g_env->topology(), 0);
    fsdp::FsdpEngine eng(test_steps::spec(m, fsdp_config({})), groups, kSeed);
    std::vector<double> loss;
    std::vector<at::Tensor> grads;
    for (const data::TokenFile* f : {&packed, &padded}) {
      const model::Batch b = all(*f);
      std::vector<int64_t> rows(b.tokens.size(0));
      for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int64_t>(i);
      std::vector<model::Batch> mine;
      for (const auto& part : data::rank_micro_batches(rows, g_env->rank(), g_env->size(), 1)) {
        const auto idx = at::tensor(part, at::kLong);
        mine.push_back({b.tokens.index_select(0, idx), b.labels.index_select(0, idx),
                        b.positions.defined() ? b.positions.index_select(0, idx) : at::Tensor()});
      }
      loss.push_back(test_steps::sft_step(eng, mine).loss);
      std::vector<at::Tensor> g;
      for (const auto& s : eng.grad_shards())
        g.push_back(s.defined() ? s.flatten() : at::zeros({0}));
      grads.push_back(at::cat(g));
      eng.release_grads();
    }
    double diff = (grads[0] - grads[1]).pow(2).sum().item<double>(),
           norm = grads[1].pow(2).sum().item<double>();
    MPI_Allreduce(MPI_IN_PLACE, &diff, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &norm, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    const double rel = std::sqrt(diff / norm);
    EXPECT_NEAR(loss[0], loss[1], 1e-6 * loss[1]) << m.model_type;
    EXPECT_LE(rel, 1e-6) << m.model_type << ": packed gradients differ from padded ones";
    if (g_env->rank() == 0)
      std::printf("  %s, world %d: loss %.9f packed vs %.9f padded, gradient rel %.1e\n",
                  m.model_type.c_str(), g_env->size(), loss[0], loss[1], rel);
  }
}

// The fused layer path (merged q/k/v and gate/up views of each unit, bound once per gather, and
// LibTorch's fused RMSNorm) trains what the composite single-rank trainer does, with biases, a
// tied head and full recomputation through the bound views.
TEST(FsdpMpi, FusedLayersEqualSingleRankTraining) {
  for (const model::ModelConfig& m : {tiny(), tiny_qwen2(), tiny_biased_tied()})
    for (Sharding s : {Sharding::kFullShard, Sharding::kHybridShard}) {
      Case c{s, 0, /*ac=*/false, /*accum=*/1};
      c.model = m;
      c.fused = true;
      expect_equivalent(c);
      c.ac = true;
      c.accum = 2;
      expect_equivalent(c);
    }
}

TEST(FsdpMpi, CheckpointingAndAccumulationModes) {
  expect_equivalent({Sharding::kFullShard, 0, true, 1});
  expect_equivalent({Sharding::kFullShard, 0, false, 4});
  expect_equivalent({Sharding::kFullShard, 0, false, 4, at::kFloat, /*sync=*/false});
  expect_equivalent({Sharding::kHybridShard, 0, true, 4, at::kFloat, /*sync=*/false});
  expect_equivalent({Sharding::kHybridShardZero2, 0, false, 2});
}

TEST(FsdpMpi, ShardGroupSizeTwo) {
  if (g_env->size() % 2 != 0) GTEST_SKIP() << "needs an even world size";
  expect_equivalent({Sharding::kHybridShard, 2, false, 1});
  expect_equivalent({Sharding::kHybridShardZero2, 2, true, 4});
}

// bf16's own error, as a yardstick: single-rank bf16 against single-rank fp32 on the same data,
// on rank 0 (oracle/from_root.h).
Gaps single_rank_bf16_vs_fp32() {
  Gaps g;
  oracle::TrainConfig t16, t32;
  t16.param_dtype = at::kBFloat16;
  t16.adamw = t32.adamw = optim_config().adamw;
  oracle::Trainer a(tiny(), t16, model::ParamStore::initialize(tiny(), kSeed)),
      b(tiny(), t32, model::ParamStore::initialize(tiny(), kSeed));
  for (int64_t s = 0; s < kSteps; ++s) {
    const model::Batch batch = global_batch(s);
    const oracle::StepResult ra = a.step({batch}, 3e-3), rb = b.step({batch}, 3e-3);
    g.loss = std::max(g.loss, rel_gap(ra.loss, rb.loss));
    g.grad = std::max(g.grad, rel_gap(ra.grad_norm, rb.grad_norm));
  }
  for (size_t i = 0; i < a.params().tensors().size(); ++i) {
    const auto ta = a.params().tensors()[i].detach(), tb = b.params().tensors()[i].detach();
    g.param_rel = std::max(g.param_rel, (ta - tb).norm().item<double>() / tb.norm().item<double>());
  }
  return g;
}

Gaps bf16_vs_fp32() {
  Gaps g = g_env->rank() == 0 ? single_rank_bf16_vs_fp32() : Gaps{};
  g.loss = oracle::from_root(g.loss);
  g.grad = oracle::from_root(g.grad);
  g.param_rel = oracle::from_root(g.param_rel);
  return g;
}

// bf16 keeps 8 significant bits. The sharded run rounds per-rank partial gradients to bf16
// where the single rank rounds the whole batch's, so it cannot match bit for bit, and Adam
// turns gradient rounding into whole-lr differences on elements whose gradient is noise. The
// yardstick is bf16's own error (single-rank bf16 against fp32): two bf16 runs that round
// differently may differ by as much as bf16 differs from fp32, and no more (measured: about
// half of it, 1.1e-2 against 2.0e-2 of the norm; losses 9e-5 against 2e-4).
TEST(FsdpMpi, Bf16TracksSingleRankBf16) {
  const Gaps floor = bf16_vs_fp32();
  for (Sharding s : {Sharding::kFullShard, Sharding::kHybridShard}) {
    const Case c{s, 0, false, 1, at::kBFloat16};
    const Gaps g = compare(c);
    EXPECT_LE(g.loss, floor.loss) << describe(c);
    EXPECT_LE(g.grad, floor.grad) << describe(c);
    EXPECT_LE(g.param_rel, floor.param_rel) << describe(c);
    if (g_env->rank() == 0)
      std::printf(
          "  %-64s loss rel %.1e (bf16 vs fp32 %.1e), grad norm rel %.1e (%.1e), param rel-norm "
          "%.1e (%.1e)\n",
          describe(c).c_str(), g.loss, floor.loss, g.grad, floor.grad, g.param_rel,
          floor.param_rel);
  }
}

TEST(FsdpMpi, BytesEqualTheAnalyticVolume) {
  for (Sharding s : strategies()) {
    const int64_t accum = 2;
    Case c{s, 0, false, accum};
    auto groups = fsdp::make_mpi_groups(s, g_env->topology(), 0);
    fsdp::FsdpEngine eng(test_steps::spec(tiny(), fsdp_config(c)), groups, kSeed);
    Stepper run(eng);
    run.step(take(global_batch(0),
                  data::rank_micro_batches(all_rows(), g_env->rank(), g_env->size(), accum)),
             1e-3);
    for (auto* g : groups.all()) g->reset_stats();
    run.step(take(global_batch(1),
                  data::rank_micro_batches(all_rows(), g_env->rank(), g_env->size(), accum)),
             1e-3);
    int64_t padded = 0, shard = 0;
    for (auto& u : eng.schedule().units())
      padded += u.layout().padded, shard += u.layout().shard_numel;
    const int64_t units = static_cast<int64_t>(eng.schedule().units().size());
    const int64_t head = eng.schedule().units().back().layout().padded;
    const bool sharded = groups.shard->size() > 1, replicated = groups.replicate->size() > 1;
    // Forward gathers every unit; resharding strategies gather again for backward, all but the
    // head, which stays gathered from its forward to its backward (FSDP2's root).
    const bool reshard = fsdp::reshard_after_forward(s);
    const int64_t gather_bytes = accum * (reshard ? 2 * padded - head : padded) * 4;
    const int64_t gather_calls = accum * (reshard ? 2 * units - 1 : units);
    const auto& sh = groups.shard->stats();
    EXPECT_EQ(sh[Op::kAllGather].bytes, sharded ? gather_bytes : 0) << describe(c);
    EXPECT_EQ(sh[Op::kAllGather].calls, sharded ? gather_calls : 0) << describe(c);
    EXPECT_EQ(sh[Op::kReduceScatter].bytes, sharded ? accum * padded * 4 : 0) << describe(c);
    EXPECT_EQ(sh[Op::kReduceScatter].calls, sharded ? accum * units : 0) << describe(c);
    EXPECT_EQ(sh[Op::kAllReduce].bytes, sharded ? 8 : 0)
        << "the grad-norm scalar only: " << describe(c);
    const auto& rep = groups.replicate->stats();
    EXPECT_EQ(rep[Op::kAllReduce].bytes, replicated ? accum * shard * 4 : 0) << describe(c);
    EXPECT_EQ(rep[Op::kAllGather].bytes + rep[Op::kReduceScatter].bytes, 0) << describe(c);
    const auto& w = groups.world->stats();
    EXPECT_EQ(w[Op::kAllReduce].bytes, 16) << "token count and loss: " << describe(c);
    EXPECT_EQ(w[Op::kAllGather].bytes + w[Op::kReduceScatter].bytes, 0) << describe(c);
  }
}

// limit_all_gathers: at most N units are gathered at once, and prefetch depth never changes the
// math.
TEST(FsdpMpi, InflightGatherLimitBoundsGatheredUnitsAndKeepsLosses) {
  std::vector<double> reference;
  for (int limit : {1, 2, 3}) {
    auto groups = fsdp::make_mpi_groups(Sharding::kFullShard, g_env->topology(), 0);
    auto cfg = fsdp_config({});
    cfg.max_inflight_gathers = limit;
    fsdp::FsdpEngine eng(test_steps::spec(tiny(), cfg), groups, kSeed);
    Stepper run(eng);
    std::vector<double> losses;
    for (int64_t step = 0; step < 3; ++step)
      losses.push_back(
          run.step(take(global_batch(step),
                        data::rank_micro_batches(all_rows(), g_env->rank(), g_env->size(), 1)),
                   1e-3)
              .loss);
    EXPECT_EQ(eng.schedule().peak_gathered_units(), limit)
        << "tiny has " << eng.schedule().units().size() << " units";
    if (reference.empty()) reference = losses;
    EXPECT_EQ(losses, reference) << "limit " << limit;
  }
}

// FSDP2's set_to_none: gradient shards exist from the step's first reduction to the optimizer
// step, and the per-phase peaks say so (CPU: the bytes the engine holds).
TEST(FsdpMpi, GradientShardsLiveOnlyFromBackwardToTheOptimizer) {
  auto groups = fsdp::make_mpi_groups(Sharding::kFullShard, g_env->topology(), 0);
  fsdp::FsdpEngine eng(test_steps::spec(tiny(), fsdp_config({})), groups, kSeed);
  optim::Optimizer opt = fsdp::make_optimizer(eng, optim_config());
  for (auto& u : eng.schedule().units())
    EXPECT_FALSE(u.grad().defined()) << "no gradient before the first backward";
  const auto g = test_steps::sft_step(
      eng,
      take(global_batch(0), data::rank_micro_batches(all_rows(), g_env->rank(), g_env->size(), 1)));
  int64_t grads = 0, two_largest = 0;
  std::vector<int64_t> sizes;
  for (auto& u : eng.schedule().units()) {
    ASSERT_TRUE(u.grad().defined());
    grads += u.grad().nbytes();
    sizes.push_back(u.layout().padded * 4);
  }
  std::sort(sizes.rbegin(), sizes.rend());
  two_largest = sizes[0] + sizes[1];
  const int64_t persistent = eng.memory().report().persistent();
  const auto fwd = g.peak_bytes[static_cast<int>(runtime::Phase::kForward)],
             bwd = g.peak_bytes[static_cast<int>(runtime::Phase::kBackward)];
  EXPECT_GE(fwd, persistent + sizes.back()) << "a unit is gathered in forward";
  EXPECT_LE(fwd, persistent + two_largest)
      << "forward holds no gradient and at most two gathered units";
  EXPECT_GE(bwd, persistent + grads) << "every gradient shard exists by the end of backward";
  opt.step(1e-3, eng.grad_shards());
  EXPECT_EQ(eng.memory().take_phase_peak(), persistent + grads)
      << "the optimizer phase holds the gradients";
  eng.release_grads();
  for (auto& u : eng.schedule().units())
    EXPECT_FALSE(u.grad().defined()) << "freed after the optimizer step";
  eng.memory().take_phase_peak();  // the phase that began with the gradients still held
  EXPECT_EQ(eng.memory().take_phase_peak(), persistent)
      << "nothing but the shards and the optimizer state is left";
}

TEST(FsdpMpi, FullShardKeepsAQuarterOfTheMemoryAtWorldFour) {
  auto groups = fsdp::make_mpi_groups(Sharding::kFullShard, g_env->topology(), 0);
  fsdp::FsdpEngine eng(test_steps::spec(tiny(), fsdp_config({})), groups, kSeed);
  const auto m = eng.memory().report();
  const int w = g_env->size();
  EXPECT_LE(m.persistent(), m.unsharded_bytes / w + 16 * m.padding_elements);
  EXPECT_EQ(m.unsharded_bytes, 16 * model::ParamStore::initialize(tiny(), kSeed).numel());
  for (auto& u : eng.schedule().units())
    EXPECT_FALSE(u.active()) << "full parameters exist only while a unit computes";
}

TEST(FsdpMpi, ShardedLoadingReadsOnlyThisRanksBytes) {
  const std::string dir =
      std::string(SHARDTRAIN_TEST_TMP) + "/fsdp_load_w" + std::to_string(g_env->size());
  auto ref = model::ParamStore::initialize(tiny(), 77);
  if (g_env->rank() == 0) {
    std::filesystem::create_directories(dir);
    io::write_safetensors(dir + "/model.safetensors", ref.named());
  }
  MPI_Barrier(MPI_COMM_WORLD);
  io::SafetensorsModel st(dir + "/model.safetensors");
  auto groups = fsdp::make_mpi_groups(Sharding::kFullShard, g_env->topology(), 0);
  fsdp::FsdpEngine eng(test_steps::spec(tiny(), fsdp_config({})), groups, kSeed, &st);
  const double total = 4.0 * ref.numel(), w = g_env->size();
  EXPECT_LE(st.bytes_read(), total / w + 4.0 * eng.memory().report().padding_elements);
  EXPECT_GE(st.bytes_read(), total / w - 4.0 * eng.memory().report().padding_elements);
  for (const auto& [name, t] : eng.full_parameters())
    EXPECT_TRUE(t.equal(ref.get(name).detach())) << name;
}

// The gradient reducer on its own, with gradients whose reduced values are known: every strategy
// sums the world's gradients into each rank's shard, and the reductions in flight (HYBRID_SHARD's
// all-reduces across replicas included) stay within the budget of one unit's bytes. Whether the
// host waits on them is not tested here (on MPI it does, once the budget is full).
TEST(FsdpMpi, GradientReducerSumsWithinItsBudgetAllReducesIncluded) {
  const int64_t units = 7, shard_numel = 24;
  const int world = g_env->size();
  for (const Sharding s : strategies()) {
    auto groups = fsdp::make_mpi_groups(s, g_env->topology(), 0);
    const int shard_size = groups.shard->size();
    const int64_t padded = shard_numel * shard_size;
    std::vector<at::Tensor> grads(units);
    fsdp::GradientReducer reducer(
        groups, at::kFloat, [&grads](int64_t u) -> at::Tensor& { return grads[u]; }, [] {});
    const int64_t budget = fsdp::scatter_bytes(padded, shard_numel, shard_size, 4);
    reducer.set_budget(budget);
    const auto ramp = at::arange(padded, at::kFloat) * 0.5;
    for (int64_t u = 0; u < units; ++u) {
      reducer.reduce(u, ramp + static_cast<float>((g_env->rank() + 1) * (u + 1)), shard_numel,
                     /*owned=*/true);
      // All-reduces across replicas hold their shards: they count against the budget too.
      EXPECT_LE(reducer.bytes_in_flight(), budget) << fsdp::sharding_name(s) << " unit " << u;
    }
    reducer.finish();
    const auto mine = ramp.narrow(0, groups.shard->rank() * shard_numel, shard_numel);
    for (int64_t u = 0; u < units; ++u) {
      const auto want = mine * world + static_cast<float>(world * (world + 1) / 2 * (u + 1));
      ASSERT_TRUE(grads[u].defined());
      EXPECT_TRUE(grads[u].allclose(want, 0, 0)) << fsdp::sharding_name(s) << " unit " << u << ": "
                                                 << (grads[u] - want).abs().max().item<float>();
    }
    EXPECT_EQ(reducer.bytes_in_flight(), 0);
  }
}

int main(int argc, char** argv) { mpi_gtest_main(argc, argv, g_env); }

namespace {

struct Fp8Gap {
  double loss = 0;    // the worst relative loss gap over the steps
  int64_t gemms = 0;  // float8 GEMMs in the first step (one micro-batch)
};

// --fp8 m against fp32 GEMMs, from the same weights at this layout, over `steps` steps.
Fp8Gap fp8_loss_gap(model::Fp8Mode m, const model::LoraConfig& lora, bool fused, int steps) {
  auto groups = fsdp::make_mpi_groups(Sharding::kFullShard, g_env->topology(), 0);
  io::SafetensorsModel weights(start_weights(tiny()));
  Case c;
  c.fused = fused;
  test_steps::EngineOptions on = fsdp_config(c), off = fsdp_config(c);
  on.fp8 = m;
  on.adapters = off.adapters = lora;
  fsdp::FsdpEngine a(test_steps::spec(tiny(), on), groups, kSeed, &weights),
      b(test_steps::spec(tiny(), off), groups, kSeed, &weights);
  Stepper ra(a), rb(b);
  Fp8Gap gap;
  for (int s = 0; s < steps; ++s) {
    const auto micro = take(global_batch(s),
                            data::rank_micro_batches(all_rows(), g_env->rank(), g_env->size(), 1));
    const int64_t before = model::fp8_gemm_count();
    const double la = ra.step(micro, 3e-3).loss;
    if (s == 0) gap.gemms = model::fp8_gemm_count() - before;
    const double lb = rb.step(micro, 3e-3).loss;
    gap.loss = std::max(gap.loss, rel_gap(la, lb));
  }
  return gap;
}

// LoRA trained `steps` steps at full_shard with and without --cpu-offload, from the same weights:
// the worst relative loss and gradient-norm gaps and absolute adapter gap. On the CPU the
// offloaded masters, moments and gradients are separate host buffers all the same (copies happen).
Gaps lora_offload_gaps(const model::LoraConfig& lora, int steps) {
  auto groups = fsdp::make_mpi_groups(Sharding::kFullShard, g_env->topology(), 0);
  io::SafetensorsModel weights(start_weights(tiny()));
  test_steps::EngineOptions on = fsdp_config({}), off = fsdp_config({});
  on.cpu_offload = true;
  on.adapters = off.adapters = lora;
  fsdp::FsdpEngine a(test_steps::spec(tiny(), on), groups, kSeed, &weights),
      b(test_steps::spec(tiny(), off), groups, kSeed, &weights);
  EXPECT_NE(a.schedule().offload(), nullptr);
  Stepper ra(a), rb(b);
  Gaps g;
  for (int s = 0; s < steps; ++s) {
    const auto micro = take(global_batch(s),
                            data::rank_micro_batches(all_rows(), g_env->rank(), g_env->size(), 1));
    g.loss = std::max(g.loss, rel_gap(ra.step(micro, 3e-3).loss, rb.step(micro, 3e-3).loss));
    g.grad = std::max(g.grad, rel_gap(ra.grad_norm, rb.grad_norm));
  }
  const auto full_a = a.full_parameters(/*adapters=*/true),
             full_b = b.full_parameters(/*adapters=*/true);
  EXPECT_EQ(full_a.size(), full_b.size());
  for (const auto& [name, t] : full_b)
    g.param = std::max(g.param, (full_a.at(name) - t).abs().max().item<double>());
  ra.opt.settle();
  EXPECT_EQ(ra.opt.adamw().step_count(), rb.opt.adamw().step_count());
  return g;
}

}  // namespace

// Tensorwise --fp8 gathers the projections' weights in float8 (one scale per weight, or per
// merged group under --fused-layers, from the amax over the shard group), decoded to the compute
// dtype; the float8 linear's cast of that gives back the same float8 values and scale, so it
// trains what the gather in the compute dtype trains: in bf16 exactly, in fp32 within an ulp of a
// scale. Every strategy, fused layers, LoRA's frozen base, offload and checkpointing.
TEST(FsdpMpi, Fp8AllGatherTrainsWhatTheComputeDtypeGatherTrains) {
  model::LoraConfig lora;
  lora.rank = 4;
  lora.dropout = 0;
  lora.targets = {"q_proj", "down_proj"};
  std::vector<std::pair<Case, model::LoraConfig>> cases;
  for (Sharding s : strategies()) cases.push_back({{s, 0, false, 1, at::kBFloat16}, {}});
  Case fused{Sharding::kFullShard, 0, /*ac=*/true, /*accum=*/2, at::kBFloat16};
  fused.fused = true;
  cases.push_back({fused, {}});
  cases.push_back({{Sharding::kFullShard, 0, false, 1, at::kBFloat16}, lora});
  Case offload{Sharding::kHybridShard, 0, false, 2, at::kFloat};
  offload.offload = true;
  cases.push_back({offload, {}});
  for (auto& [c, l] : cases) {
    c.fp8 = model::Fp8Mode::kTensorwise;
    auto groups = fsdp::make_mpi_groups(c.sharding, g_env->topology(), 0);
    io::SafetensorsModel weights(start_weights(tiny()));
    test_steps::EngineOptions on = fsdp_config(c), off = fsdp_config(c);
    on.adapters = off.adapters = l;
    off.fp8_all_gather = false;
    fsdp::FsdpEngine a(test_steps::spec(tiny(), on), groups, kSeed, &weights),
        b(test_steps::spec(tiny(), off), groups, kSeed, &weights);
    const std::string what = describe(c) + (l.enabled() ? " lora" : "");
    const bool sharded = groups.shard->size() > 1;
    for (const fsdp::FlatUnit& u : a.schedule().units())
      EXPECT_EQ(u.coded_gather(), sharded && u.kind() == model::UnitKind::kDecoderLayer) << what;
    for (const fsdp::FlatUnit& u : b.schedule().units()) EXPECT_FALSE(u.coded_gather()) << what;
    Stepper ra(a), rb(b);
    for (int s = 0; s < 3; ++s) {
      const auto micro = take(global_batch(s), data::rank_micro_batches(all_rows(), g_env->rank(),
                                                                        g_env->size(), c.accum));
      const double la = ra.step(micro, 3e-3).loss, lb = rb.step(micro, 3e-3).loss;
      if (c.dtype == at::kBFloat16)
        EXPECT_EQ(la, lb) << what << " step " << s;
      else
        EXPECT_LE(rel_gap(la, lb), 1e-6) << what << " step " << s;
    }
  }
}

// --fp8 (emulated on the CPU): every strategy, accumulation with checkpointing, no-sync
// accumulation, CPU offload (its steps armed) and a biased tied model train what the single-rank
// trainer trains with float8 GEMMs over the same micro-batches, for two steps (kFp8Layouts says
// why not more).
TEST(FsdpMpi, Fp8EqualsSingleRankFp8Training) {
  for (const model::Fp8Mode m : {model::Fp8Mode::kTensorwise, model::Fp8Mode::kRowwise}) {
    std::vector<Case> cases;
    for (Sharding s : strategies()) cases.push_back({s, 0, /*ac=*/false, /*accum=*/1});
    cases.push_back({Sharding::kFullShard, 0, /*ac=*/true, /*accum=*/2});
    cases.push_back({Sharding::kHybridShard, 0, false, 2, at::kFloat, /*sync=*/false});
    Case biased{Sharding::kFullShard, 0, false, 1};
    biased.model = tiny_biased_tied();
    cases.push_back(biased);
    Case offload{Sharding::kFullShard, 0, false, 2};
    offload.offload = true;
    offload.clip = 0;
    cases.push_back(offload);
    for (Case& c : cases) {
      c.fp8 = m;
      const Gaps g = compare(c, 2);
      EXPECT_LE(g.loss, kFp8Layouts) << describe(c);
      EXPECT_LE(g.grad_first, 1e-5) << describe(c);
      EXPECT_LE(g.param_rel, kFp8Params) << describe(c);
      if (g_env->rank() == 0)
        std::printf("  %-64s loss rel %.1e, grad norm rel %.1e, param rel %.1e\n",
                    describe(c).c_str(), g.loss, g.grad, g.param_rel);
    }
  }
}

// Float8 GEMMs train near the fp32 ones, but not on them (the casts happen): full fine-tuning,
// the fused layers' merged projections (one scale for q, k and v together where tensorwise) and
// LoRA (the frozen base in float8, the adapters not).
TEST(FsdpMpi, Fp8TrainsNearTheRunWithoutIt) {
  model::LoraConfig none, lora;
  lora.rank = 4;
  lora.dropout = 0;
  lora.targets = {"q_proj", "v_proj", "down_proj"};
  for (const model::Fp8Mode m : {model::Fp8Mode::kTensorwise, model::Fp8Mode::kRowwise})
    for (const auto& [l, fused] :
         {std::pair{none, false}, std::pair{none, true}, std::pair{lora, false}}) {
      const Fp8Gap gap = fp8_loss_gap(m, l, fused, 4);
      const std::string what = std::string(model::fp8_mode_name(m)) +
                               (l.enabled() ? " lora" : " full") + (fused ? " fused" : "");
      EXPECT_GT(gap.loss, 1e-6) << what << ": float8 changed nothing";
      EXPECT_LT(gap.loss, 2e-2) << what;
      // Every projection of every layer in float8: forward, backward's input gradient and (trained
      // weights only) weight gradient; fused layers merge q/k/v and gate/up into one GEMM each.
      // Under LoRA the base is frozen (no weight gradient), and the first layer's q/k/v read the
      // frozen embedding, so their input needs no gradient either. A projection left in the
      // compute dtype moves the loss less than the bounds above can see.
      const int64_t projections = tiny().num_layers * (fused ? 4 : 7);
      EXPECT_EQ(gap.gemms, l.enabled() ? 2 * projections - 3 : 3 * projections) << what;
      if (g_env->rank() == 0)
        std::printf("  fp8 %-20s loss rel to fp32 %.1e, %lld float8 GEMMs a step\n", what.c_str(),
                    gap.loss, static_cast<long long>(gap.gemms));
    }
}

// --cpu-offload against the single-rank trainer, as every strategy is: the masters, moments and
// gradients on the host, the steps on the host thread (armed during the backward pass without
// clipping), a tied head reading the embedding's unit.
TEST(FsdpMpi, CpuOffloadTrainsWhatTheSingleRankTrainerTrains) {
  std::vector<Case> cases;
  for (Sharding s : strategies()) cases.push_back({s, 0, false, 1});
  cases.push_back({Sharding::kFullShard, 0, /*ac=*/true, /*accum=*/3});
  cases.push_back({Sharding::kHybridShard, 0, false, 2, at::kFloat, /*sync=*/false});
  cases.back().clip = 0.5;
  cases.push_back({Sharding::kFullShard, 0, false, 2});
  cases.back().clip = 0;
  cases.push_back({Sharding::kHybridShard, 0, /*ac=*/true, 1});
  cases.back().clip = 0;
  cases.push_back({Sharding::kFullShard, 0, false, 2});
  cases.back().model = tiny_qwen2();
  for (Case& c : cases) {
    c.offload = true;
    expect_equivalent(c, 6);
  }
}

// LoRA's adapters offloaded (the oracle has no adapters): against the same run on the device.
TEST(FsdpMpi, CpuOffloadOfLoraTrainsWhatTheDeviceTrains) {
  model::LoraConfig lora;
  lora.rank = 4;
  lora.dropout = 0;
  lora.targets = {"q_proj", "v_proj", "down_proj"};
  const Gaps g = lora_offload_gaps(lora, 6);
  EXPECT_LE(g.loss, 1e-6);
  EXPECT_LE(g.grad, 1e-6);
  EXPECT_LE(g.param, 1e-6);
  if (g_env->rank() == 0)
    std::printf(
        "  offload lora full_shard world=%d loss rel %.1e, grad norm rel %.1e, param abs "
        "%.1e\n",
        g_env->size(), g.loss, g.grad, g.param);
}

TEST(FsdpMpi, CpuOffloadSkipsANonFiniteStepOnTheHost) {
  auto groups = fsdp::make_mpi_groups(Sharding::kFullShard, g_env->topology(), 0);
  test_steps::EngineOptions f = fsdp_config({});
  f.cpu_offload = true;
  fsdp::FsdpEngine eng(test_steps::spec(tiny(), f), groups, kSeed);
  optim::Optimizer opt = fsdp::make_optimizer(eng, optim_config());
  test_steps::sft_step(
      eng,
      take(global_batch(0), data::rank_micro_batches(all_rows(), g_env->rank(), g_env->size(), 1)));
  const auto before = eng.full_parameters();
  auto grads = eng.grad_shards();
  for (const auto& t : grads) EXPECT_TRUE(t.device().is_cpu());
  const at::Tensor norm = opt.grad_norm(grads);
  opt.apply(1e-2, grads, norm, at::ones({}));  // skip = 1, as the non-finite guard hands it
  eng.release_grads();
  const auto after = eng.full_parameters();  // waits for the host's steps
  for (const auto& [name, t] : before) EXPECT_TRUE(at::equal(t, after.at(name))) << name;
  EXPECT_EQ(opt.adamw().step_count(), 0) << "a skipped step is not counted";
}

TEST(FsdpMpi, CpuOffloadLeavesNoTrainingStateOnTheDevice) {
  auto groups = fsdp::make_mpi_groups(Sharding::kFullShard, g_env->topology(), 0);
  test_steps::EngineOptions f = fsdp_config({});
  f.cpu_offload = true;
  fsdp::FsdpEngine eng(test_steps::spec(tiny(), f), groups, kSeed);
  const fsdp::MemoryReport m = eng.memory().report();
  EXPECT_EQ(m.persistent(), 0) << "master and moments live on the host";
  int64_t shard = 0;
  for (const auto& u : eng.schedule().units()) shard += u.layout().shard_numel;
  EXPECT_EQ(m.host_bytes, (16 + 4) * shard) << "fp32 master, moments, gradient and fp32 mirror";
  test_steps::sft_step(
      eng,
      take(global_batch(0), data::rank_micro_batches(all_rows(), g_env->rank(), g_env->size(), 2)));
  for (const auto& u : eng.schedule().units()) {
    EXPECT_FALSE(u.grad().defined()) << "each gradient shard left the device once copied";
    EXPECT_TRUE(u.master().is_cpu());
  }
  eng.grad_shards();
  eng.release_grads();
}
