// LoRA under FSDP against Hugging Face PEFT (tests/python/lora_reference.py), under mpirun at
// 1 rank, 3 and 4 ranks full_shard and 2 simulated nodes x 2 (hybrid_shard): logits and adapter
// gradients within 1e-5, three AdamW steps within 1e-4, a frozen base that never changes, and
// activation checkpointing, accumulation and dropout's recompute giving the same gradients; the
// fused layers with every projection targeted and with q and v only; the base's GEMMs in float8.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>

#include "mpi_gtest_main.h"
#include "sft_step.h"
#include "shardtrain/data/sampler.h"
#include "shardtrain/fsdp/engine.h"
#include "shardtrain/model/fp8.h"
#include "shardtrain/runtime/mpi_env.h"
#include "test_paths.h"

using namespace shardtrain;
using fsdp::Sharding;

namespace {
runtime::MpiEnv* g_env = nullptr;
const std::string kRef = std::string(SHARDTRAIN_REF_DIR) + "/lora";

struct Fixture {
  model::ModelConfig cfg = model::resolve_model(kRef + "/model/config.json");
  io::SafetensorsFile ref{kRef + "/reference.safetensors"};
  io::SafetensorsModel base{kRef + "/model"};
  io::SafetensorsModel adapters{kRef + "/adapter_init/adapter_model.safetensors"};
  model::Batch batch{ref.read("tokens"), ref.read("labels")};
};

model::LoraConfig peft_lora() {  // as lora_reference.py's LoraConfig
  model::LoraConfig l;
  l.rank = 4;
  l.alpha = 8;
  l.dropout = 0;
  l.targets = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  return l;
}

// Hybrid (2 x 2) when the test runs on simulated nodes, else full_shard.
Sharding strategy() {
  return g_env->topology().local_size < g_env->size() ? Sharding::kHybridShard
                                                      : Sharding::kFullShard;
}

test_steps::EngineOptions config(fsdp::Recompute ac = fsdp::Recompute::kNone,
                                 at::ScalarType dtype = at::kFloat) {
  test_steps::EngineOptions f;
  f.sharding = strategy();
  f.activation_checkpointing.mode = ac;
  f.param_dtype = dtype;
  f.adapters = peft_lora();
  return f;
}

std::vector<model::Batch> my_rows(const model::Batch& b, int64_t accum) {
  std::vector<int64_t> all(b.tokens.size(0));
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
  std::vector<model::Batch> out;
  for (const auto& p : data::rank_micro_batches(all, g_env->rank(), g_env->size(), accum)) {
    auto idx = at::tensor(p, at::kLong);
    out.push_back({b.tokens.index_select(0, idx), b.labels.index_select(0, idx)});
  }
  return out;
}

std::string where() {
  return std::string(fsdp::sharding_name(strategy())) + " world=" + std::to_string(g_env->size());
}

// Where the shard group is a multiple of 3, every layer's adapters end in padding (4,352
// elements), so the uneven shards are compared with PEFT; checked here so that a change of the
// reference model cannot silently stop it.
void expect_padded_adapters(fsdp::FsdpEngine& eng, const comm::ParallelDims& groups) {
  const int size = groups.shard->size();
  if (size % 3 != 0) return;
  for (auto& a : eng.schedule().adapters())
    if (a.layout().numel > 0)
      EXPECT_NE(a.layout().numel % size, 0)
          << "adapters of " << a.layout().numel << " elements divide evenly";
  EXPECT_GT(eng.memory().report().padding_elements, 0) << where();
}

// The worst |grad - PEFT grad| over this rank's adapter pieces; `variant`: lora_reference.py's
// prefix ("fp8.rowwise.", "qv.") or "" for the main case.
double worst_grad_gap(fsdp::FsdpEngine& eng, const Fixture& f, const std::string& variant = "") {
  const auto grads = eng.grad_shards();
  double worst = 0;
  for (size_t i = 0; i < eng.layout().pieces().size(); ++i) {
    const auto& p = eng.layout().pieces()[i];
    const auto want = f.ref.read(variant + "grad." + model::peft_key(p.name))
                          .flatten()
                          .narrow(0, p.param_offset, p.numel);
    EXPECT_TRUE(grads[i].defined()) << p.name;
    worst = std::max(worst, (grads[i] - want).abs().max().item<double>());
  }
  return worst;
}
}  // namespace

TEST(LoraMpi, LogitsEqualPeft) {
  Fixture f;
  auto groups = fsdp::make_mpi_groups(strategy(), g_env->topology(), 0);
  fsdp::FsdpEngine eng(test_steps::spec(f.cfg, config(), at::kCPU), groups, 1, &f.base,
                       &f.adapters);
  const auto logits = eng.logits(f.batch.tokens);
  EXPECT_LE((logits - f.ref.read("logits")).abs().max().item<double>(), 1e-5) << where();
  // The adapters matter: without them the logits are the base model's, far from PEFT's.
  test_steps::EngineOptions off = config();
  off.adapters.rank = 0;
  fsdp::FsdpEngine plain(test_steps::spec(f.cfg, off), groups, 1, &f.base);
  EXPECT_GT((plain.logits(f.batch.tokens) - f.ref.read("logits")).abs().max().item<double>(), 1e-3);
}

TEST(LoraMpi, AdapterGradientsEqualPeftAndTheBaseHasNone) {
  Fixture f;
  auto groups = fsdp::make_mpi_groups(strategy(), g_env->topology(), 0);
  for (fsdp::Recompute ac :
       {fsdp::Recompute::kNone, fsdp::Recompute::kSelective, fsdp::Recompute::kFull})
    for (int64_t accum : {1, 2, -2}) {  // -2: two micro-steps reduced once (no_sync_accumulation)
      auto c = config(ac);
      c.no_sync_accumulation = accum < 0;
      accum = std::abs(accum);
      fsdp::FsdpEngine eng(test_steps::spec(f.cfg, c, at::kCPU), groups, 1, &f.base, &f.adapters);
      expect_padded_adapters(eng, groups);
      const auto r = test_steps::sft_step(eng, my_rows(f.batch, accum));
      EXPECT_NEAR(r.loss, f.ref.read("loss").item<double>(), 1e-5) << where();
      EXPECT_LE(worst_grad_gap(eng, f), 1e-5)
          << where() << " ac=" << fsdp::recompute_name(ac) << " accum=" << accum;
      // The trainable pieces are the adapters only, 28 tensors sharded over the shard group.
      for (const auto& p : eng.layout().pieces())
        EXPECT_NE(p.name.find(".lora_"), std::string::npos) << p.name;
      for (auto& u : eng.schedule().units()) {
        EXPECT_TRUE(u.frozen());
        EXPECT_FALSE(u.grad().defined()) << "the frozen base has no gradient shard";
        EXPECT_EQ(u.master().scalar_type(), at::kFloat)
            << "fp32 compute: the base is kept in fp32 here";
      }
    }
}

// --fused-layers under LoRA: every projection is targeted, so each runs on its own through a view
// of its merged group's view (the base's units are bound merged) and gets its adapter; the
// gradients are still PEFT's, with and without recomputation.
TEST(LoraMpi, FusedLayersGradientsEqualPeft) {
  Fixture f;
  auto groups = fsdp::make_mpi_groups(strategy(), g_env->topology(), 0);
  for (fsdp::Recompute ac : {fsdp::Recompute::kNone, fsdp::Recompute::kFull}) {
    auto c = config(ac);
    c.fused_layers = true;
    fsdp::FsdpEngine eng(test_steps::spec(f.cfg, c, at::kCPU), groups, 1, &f.base, &f.adapters);
    const auto r = test_steps::sft_step(eng, my_rows(f.batch, 1));
    EXPECT_NEAR(r.loss, f.ref.read("loss").item<double>(), 1e-5) << where();
    EXPECT_LE(worst_grad_gap(eng, f), 1e-5) << where() << " ac=" << fsdp::recompute_name(ac);
  }
}

// --fused-layers with adapters on q and v only: the merged q k v GEMM's k part has no adapter,
// and the q and v parts each take theirs (PEFT with target_modules q_proj, v_proj).
TEST(LoraMpi, FusedLayersWithQAndVOnlyEqualPeft) {
  Fixture f;
  io::SafetensorsModel qv{kRef + "/adapter_init_qv/adapter_model.safetensors"};
  auto groups = fsdp::make_mpi_groups(strategy(), g_env->topology(), 0);
  for (const bool fused : {true, false}) {
    auto c = config();
    c.fused_layers = fused;
    c.adapters.targets = {"q_proj", "v_proj"};
    fsdp::FsdpEngine eng(test_steps::spec(f.cfg, c, at::kCPU), groups, 1, &f.base, &qv);
    EXPECT_EQ(eng.full_parameters(/*adapters=*/true).size(), 8u);
    const auto r = test_steps::sft_step(eng, my_rows(f.batch, 2));
    EXPECT_NEAR(r.loss, f.ref.read("qv.loss").item<double>(), 1e-5) << where();
    EXPECT_LE(worst_grad_gap(eng, f, "qv."), 1e-5) << where() << (fused ? " fused" : "");
  }
}

// --fp8 under LoRA on the CPU's emulation: the frozen base's projections multiply in float8 (the
// forward and the input gradient), the adapters in fp32, against PEFT whose base layers run
// lora_reference.py's float8 GEMMs (torchao's recipe written out). Float8's scales come from each
// micro-batch's amax, so this holds at one rank, where the micro-batch is PEFT's batch; the
// layouts' equality under --fp8 is FsdpMpi.Fp8EqualsSingleRankFp8Training's.
TEST(LoraMpi, Fp8BaseGemmsEqualPeftWithFloat8BaseLayers) {
  if (g_env->size() != 1)
    GTEST_SKIP() << "float8's scales are per micro-batch: PEFT's is the whole batch";
  Fixture f;
  auto groups = fsdp::make_mpi_groups(strategy(), g_env->topology(), 0);
  for (const model::Fp8Mode m : {model::Fp8Mode::kTensorwise, model::Fp8Mode::kRowwise}) {
    const std::string variant = std::string("fp8.") + model::fp8_mode_name(m) + ".";
    auto c = config();
    c.fp8 = m;
    // transformers' loss: the chunked one's summation order can tip a float8 tie.
    c.loss_chunk = -1;
    fsdp::FsdpEngine eng(test_steps::spec(f.cfg, c, at::kCPU), groups, 1, &f.base, &f.adapters);
    const int64_t before = model::fp8_gemm_count();
    const auto r = test_steps::sft_step(eng, my_rows(f.batch, 1));
    // Forward and input gradient per projection, less the first layer's q, k and v (their input,
    // the frozen embedding's, needs no gradient); no weight gradient for the frozen base.
    EXPECT_EQ(model::fp8_gemm_count() - before, 2 * 7 * f.cfg.num_layers - 3) << variant;
    EXPECT_NEAR(r.loss, f.ref.read(variant + "loss").item<double>(), 1e-5) << variant;
    const double gap = worst_grad_gap(eng, f, variant);
    EXPECT_LE(gap, 1e-5) << variant;
    // Float8 matters here: its gradients are far from fp32's, so the bound above can fail.
    double fp32_gap = 0;
    for (const auto& [name, t] : eng.full_parameters(/*adapters=*/true))
      fp32_gap = std::max(fp32_gap, (f.ref.read(variant + "grad." + model::peft_key(name)) -
                                     f.ref.read("grad." + model::peft_key(name)))
                                        .abs()
                                        .max()
                                        .item<double>());
    EXPECT_GT(fp32_gap, 100 * std::max(gap, 1e-6)) << variant;
    std::printf("  %s: adapter gradients within %.1e of PEFT's (float8 vs fp32 in PEFT: %.1e)\n",
                variant.c_str(), gap, fp32_gap);
  }
}

TEST(LoraMpi, ThreeAdamWStepsEqualPeftAndTorchAdamW) {
  Fixture f;
  auto groups = fsdp::make_mpi_groups(strategy(), g_env->topology(), 0);
  fsdp::FsdpEngine eng(test_steps::spec(f.cfg, config(), at::kCPU), groups, 1, &f.base,
                       &f.adapters);
  expect_padded_adapters(eng, groups);
  optim::OptimizerConfig oc;
  oc.adamw = {0.9, 0.95, 1e-8, 0.1};
  oc.grad_clip = 1.0;
  optim::Optimizer opt = fsdp::make_optimizer(eng, oc);
  const auto losses = f.ref.read("adamw_losses");
  for (int64_t s = 0; s < 3; ++s) {
    const auto r = test_steps::sft_step(eng, my_rows(f.batch, 1));
    opt.step(1e-3, eng.grad_shards());
    eng.release_grads();
    EXPECT_NEAR(r.loss, losses[s].item<double>(), 1e-4) << "step " << s << " " << where();
  }
  double worst = 0;
  for (const auto& [name, t] : eng.full_parameters(/*adapters=*/true)) {
    const auto want = f.ref.read("final." + model::peft_key(name));
    worst = std::max(worst, (t - want).abs().max().item<double>());
    EXPECT_GT((t - f.adapters.read(model::peft_key(name))).abs().max().item<double>(), 1e-4)
        << name << " moved";
  }
  EXPECT_LE(worst, 1e-4) << where();
  if (g_env->rank() == 0)
    std::printf("  %s: adapters after 3 AdamW steps within %.1e of PEFT\n", where().c_str(), worst);
  EXPECT_EQ(eng.full_parameters(/*adapters=*/true).size(), 28u);
  // The base is frozen: byte-identical to the file it was read from.
  for (const auto& [name, t] : eng.full_parameters())
    EXPECT_TRUE(t.equal(f.base.read(name))) << name;
}

// bf16 compute keeps the base in bf16 (no fp32 copy) and still learns what fp32 learns, to bf16's
// precision.
TEST(LoraMpi, Bf16KeepsTheBaseInBf16) {
  Fixture f;
  auto groups = fsdp::make_mpi_groups(strategy(), g_env->topology(), 0);
  fsdp::FsdpEngine eng(
      test_steps::spec(f.cfg, config(fsdp::Recompute::kFull, at::kBFloat16), at::kCPU), groups, 1,
      &f.base, &f.adapters);
  for (auto& u : eng.schedule().units()) EXPECT_EQ(u.master().scalar_type(), at::kBFloat16);
  const auto m = eng.memory().report();
  int64_t base_elems = 0;
  for (auto& u : eng.schedule().units()) base_elems += u.layout().shard_numel;
  EXPECT_EQ(m.base_bytes, 2 * base_elems);
  EXPECT_EQ(
      m.param_bytes, 4 * [&] {
        int64_t n = 0;
        for (auto& a : eng.schedule().adapters()) n += a.layout().shard_numel;
        return n;
      }());
  const auto r = test_steps::sft_step(eng, my_rows(f.batch, 2));
  EXPECT_NEAR(r.loss, f.ref.read("loss").item<double>(), 2e-2) << where();
}

// Dropout's masks depend on the pass's seed only, so activation checkpointing's recompute
// draws the same ones: the gradients with and without it (full or selective) agree, and differ
// from no dropout.
TEST(LoraMpi, DropoutRecomputesTheSameMasks) {
  Fixture f;
  auto groups = fsdp::make_mpi_groups(strategy(), g_env->topology(), 0);
  using fsdp::Recompute;
  std::vector<std::vector<at::Tensor>> grads;
  for (auto [ac, p] : {std::pair{Recompute::kNone, 0.3}, std::pair{Recompute::kFull, 0.3},
                       std::pair{Recompute::kSelective, 0.3}, std::pair{Recompute::kNone, 0.0}}) {
    auto c = config(ac);
    c.adapters.dropout = p;
    fsdp::FsdpEngine eng(test_steps::spec(f.cfg, c, at::kCPU), groups, 1, &f.base, &f.adapters);
    test_steps::sft_step(eng, my_rows(f.batch, 1));
    grads.push_back({});
    for (auto& g : eng.grad_shards()) grads.back().push_back(g.clone());
  }
  double full_gap = 0, selective_gap = 0, p_gap = 0;
  for (size_t i = 0; i < grads[0].size(); ++i) {
    full_gap = std::max(full_gap, (grads[0][i] - grads[1][i]).abs().max().item<double>());
    selective_gap = std::max(selective_gap, (grads[0][i] - grads[2][i]).abs().max().item<double>());
    p_gap = std::max(p_gap, (grads[0][i] - grads[3][i]).abs().max().item<double>());
  }
  EXPECT_LE(full_gap, 1e-6) << where();
  EXPECT_LE(selective_gap, 1e-6) << where();
  EXPECT_GT(p_gap, 1e-4) << "dropout changed nothing";
}

int main(int argc, char** argv) { mpi_gtest_main(argc, argv, g_env); }
