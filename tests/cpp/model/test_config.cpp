// Model configuration: published parameter counts, Hugging Face names and config.json fields,
// the seeded init, FLOPs per token and the accelerator table MFU reads.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "shardtrain/model/config.h"
#include "shardtrain/model/params.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/mpi_env.h"
#include "shardtrain/hw/accelerators.h"
#include "shardtrain/model/flops.h"

using namespace shardtrain;

TEST(Config, PublishedLlama2ParameterCounts) {
  // Counts of meta-llama/Llama-2-{7b,13b,70b}-hf, summed over their safetensors.
  EXPECT_EQ(model::model_preset("llama2-7b").num_params(), 6738415616);
  EXPECT_EQ(model::model_preset("llama2-13b").num_params(), 13015864320);
  EXPECT_EQ(model::model_preset("llama2-70b").num_params(), 68976648192);
  EXPECT_EQ(model::model_preset("llama2-70b").num_kv_heads, 8);
}

TEST(Config, ParamSpecsUseHuggingFaceNamesAndSumToCount) {
  auto cfg = model::model_preset("tiny");
  auto specs = model::llama_param_specs(cfg);
  EXPECT_EQ(specs.front().name, "model.embed_tokens.weight");
  EXPECT_EQ(specs[1].name, "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(specs[2].shape, (std::vector<int64_t>{cfg.num_kv_heads * cfg.head_dim(), cfg.hidden_size}));
  EXPECT_EQ(specs.back().name, "lm_head.weight");
  EXPECT_EQ(specs.back().unit, cfg.num_layers + 1);
  int64_t n = 0;
  for (const auto& s : specs) n += s.numel();
  EXPECT_EQ(n, cfg.num_params());
}

TEST(Config, UnknownPresetNamesTheOption) {
  try {
    model::model_preset("llama2-8b");
    FAIL() << "expected UsageError";
  } catch (const runtime::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--model"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("llama2-7b"), std::string::npos);
  }
}

TEST(Config, ValidationCatchesBadHeads) {
  auto c = model::model_preset("tiny");
  c.num_heads = 5;
  EXPECT_THROW(c.validate(), runtime::UsageError);
  c = model::model_preset("tiny");
  c.num_kv_heads = 3;
  EXPECT_THROW(c.validate(), runtime::UsageError);
  EXPECT_NO_THROW(model::model_preset("llama2-70b").validate());
}

TEST(Config, ReadsHuggingFaceJsonBothRopeLayouts) {
  nlohmann::json j = model::model_to_hf_json(model::model_preset("small"));
  auto c = model::model_from_hf_json(j, "x");
  EXPECT_EQ(c.hidden_size, 256);
  EXPECT_EQ(c.num_kv_heads, 4);
  j.erase("rope_theta");
  j["rope_parameters"] = {{"rope_theta", 500000.0}, {"rope_type", "default"}};
  EXPECT_DOUBLE_EQ(model::model_from_hf_json(j, "x").rope_theta, 500000.0);
  j["rope_parameters"]["rope_type"] = "llama3";
  EXPECT_THROW(model::model_from_hf_json(j, "x"), runtime::UsageError);
  j = model::model_to_hf_json(model::model_preset("small"));
  j.erase("hidden_size");
  EXPECT_THROW(model::model_from_hf_json(j, "x"), runtime::UsageError);
}

// transformers writes "torch_dtype", and from 4.56 "dtype"; either names what the weights are stored in.
TEST(Config, ReadsTorchDtypeUnderEitherKey) {
  nlohmann::json j = model::model_to_hf_json(model::model_preset("small"));
  EXPECT_EQ(model::model_from_hf_json(j, "x").torch_dtype, "float32");
  j.erase("torch_dtype");
  EXPECT_EQ(model::model_from_hf_json(j, "x").torch_dtype, "");
  j["dtype"] = "bfloat16";
  EXPECT_EQ(model::model_from_hf_json(j, "x").torch_dtype, "bfloat16");
  j["dtype"] = 16;
  EXPECT_THROW(model::model_from_hf_json(j, "x"), runtime::UsageError);
}

TEST(Config, DeterministicInitPerParameter) {
  auto specs = model::llama_param_specs(model::model_preset("tiny"));
  auto a = model::init_param(specs[1], 7), b = model::init_param(specs[1], 7), c = model::init_param(specs[1], 8);
  EXPECT_TRUE(a.equal(b));
  EXPECT_FALSE(a.equal(c));
  EXPECT_FALSE(model::init_param(specs[2], 7).narrow(0, 0, 1).equal(a.narrow(0, 0, 1)));
  EXPECT_NEAR(a.std().item<double>(), 0.02, 0.002);
  EXPECT_TRUE(model::init_param(specs[8], 7).eq(1).all().item<bool>());  // input_layernorm
}

TEST(Flops, TorchtitanFormula) {
  auto c = model::model_preset("llama2-7b");
  const double n = 6738415616.0 - 32000.0 * 4096;
  EXPECT_DOUBLE_EQ(model::flops_per_token(c, 4096), 6 * n + 12.0 * 32 * 32 * 128 * 4096);
  EXPECT_EQ(hw::peak_tflops_for_device("NVIDIA H100 80GB HBM3"), 989.0);
  EXPECT_EQ(hw::peak_tflops_for_device("NVIDIA A100-SXM4-80GB"), 312.0);
  EXPECT_EQ(hw::peak_tflops_for_device("cpu"), 0.0);
  EXPECT_EQ(hw::resolve_peak_tflops(0, "NVIDIA H100 80GB HBM3"), 989.0);
  EXPECT_EQ(hw::resolve_peak_tflops(0, "cpu"), hw::kNominalCpuPeakTflops);
  EXPECT_EQ(hw::resolve_peak_tflops(2.5, "NVIDIA A100-SXM4-80GB"), 2.5);
}


TEST(Config, MalformedConfigJsonIsAUsageErrorNamingTheFile) {
  const std::string ok = R"({"vocab_size":512,"hidden_size":64,"intermediate_size":176,"num_hidden_layers":2,"num_attention_heads":4)";
  EXPECT_EQ(model::model_from_hf_text(ok + "}", "c.json").vocab_size, 512);
  EXPECT_EQ(model::model_from_hf_text(ok + R"(,"max_position_embeddings":2048.0})", "c.json").max_position_embeddings, 2048);
  auto bad = [](const std::string& text, const std::string& want) {
    try {
      model::model_from_hf_text(text, "c.json").validate();
      ADD_FAILURE() << "accepted " << text;
    } catch (const runtime::UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  bad("[1, 2]", "c.json: config.json is a JSON array, not an object");  // nlohmann's type_error before
  bad(ok + R"(,"tie_word_embeddings":"no"})", "\"tie_word_embeddings\" must be true or false");
  bad(ok + R"(,"rope_parameters":{"rope_type":3}})", "rope_type must be a string");
  bad(ok + R"(,"max_position_embeddings":1e300})", "must be an integer");  // UB as an int64 cast before
  bad(ok + R"(,"max_position_embeddings":"4096"})", "has the wrong type");
  bad(R"({"vocab_size":512,"hidden_size":1099511627776,"intermediate_size":176,"num_hidden_layers":4096,"num_attention_heads":4})",
      "over the 2^50 this build supports");  // num_params() overflowed int64 before
  bad("{\"vocab_size\":", "invalid JSON");
}
