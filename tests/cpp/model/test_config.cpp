// Model configuration: published parameter counts, Hugging Face names and config.json fields,
// the seeded init, FLOPs per token and the accelerator table MFU reads.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "shardtrain/hw/accelerators.h"
#include "shardtrain/model/config.h"
#include "shardtrain/model/config_fields.h"
#include "shardtrain/model/flops.h"
#include "shardtrain/model/params.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/mpi_env.h"
#include "test_paths.h"

using namespace shardtrain;

TEST(Config, PublishedLlama2ParameterCounts) {
  // Counts of meta-llama/Llama-2-{7b,13b,70b}-hf, summed over their safetensors.
  EXPECT_EQ(model::model_preset("llama2-7b").num_params(), 6738415616);
  EXPECT_EQ(model::model_preset("llama2-13b").num_params(), 13015864320);
  EXPECT_EQ(model::model_preset("llama2-70b").num_params(), 68976648192);
  EXPECT_EQ(model::model_preset("llama2-70b").num_kv_heads, 8);
}

TEST(Config, PublishedParameterCountsOfLlama3MistralQwen2) {
  // Counts of meta-llama/Llama-3.1-{8B,70B,405B}, Llama-3.2-{1B,3B} (tied),
  // mistralai/Mistral-7B-v0.3 and Qwen/Qwen2.5-7B (q/k/v biases), as their model cards give them.
  EXPECT_EQ(model::model_preset("llama3.1-8b").num_params(), 8030261248);
  EXPECT_EQ(model::model_preset("llama3.1-70b").num_params(), 70553706496);
  EXPECT_EQ(model::model_preset("llama3.1-405b").num_params(), 405853388800);
  EXPECT_EQ(model::model_preset("llama3.2-1b").num_params(), 1235814400);
  EXPECT_EQ(model::model_preset("llama3.2-3b").num_params(), 3212749824);
  EXPECT_EQ(model::model_preset("mistral-7b").num_params(), 7248023552);
  EXPECT_EQ(model::model_preset("qwen2.5-7b").num_params(), 7615616512);
  // A tied head still multiplies: its matrix counts in the flops (6 N per token).
  const auto tied = model::model_preset("llama3.2-1b");
  EXPECT_EQ(tied.num_matmul_params(), tied.num_params());
}

// Biases follow their weights, a tied lm_head is not a second parameter, and the specs sum to the
// count.
TEST(Config, ParamSpecsOfBiasesAndTiedEmbeddings) {
  for (const char* name : {"qwen2.5-7b", "llama3.2-1b"}) {
    model::ModelConfig cfg = model::model_preset(name);
    cfg.num_layers = 1;
    cfg.mlp_bias = true;  // qwen2 ignores them, as transformers does
    cfg.attention_bias = cfg.mlp_bias;
    const auto specs = model::llama_param_specs(cfg);
    int64_t n = 0;
    int biases = 0;
    for (const auto& s : specs) {
      n += s.numel();
      biases += s.is_bias;
      EXPECT_EQ(s.decays(), !s.is_bias && !s.is_norm) << s.name;
    }
    EXPECT_EQ(n, cfg.num_params()) << name;
    EXPECT_EQ(biases, cfg.model_type == "qwen2" ? 3 : 7) << name;
    EXPECT_EQ(specs[2].name, "model.layers.0.self_attn.q_proj.bias");
    EXPECT_EQ(specs[2].shape, (std::vector<int64_t>{cfg.num_heads * cfg.head_dim()}));
    const bool has_head = specs.back().name == "lm_head.weight";
    EXPECT_EQ(has_head, !cfg.tie_word_embeddings) << name;
    EXPECT_STREQ(model::names::lm_head(cfg),
                 cfg.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
  }
}

TEST(Config, ParamSpecsUseHuggingFaceNamesAndSumToCount) {
  auto cfg = model::model_preset("tiny");
  auto specs = model::llama_param_specs(cfg);
  EXPECT_EQ(specs.front().name, "model.embed_tokens.weight");
  EXPECT_EQ(specs[1].name, "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(specs[2].shape,
            (std::vector<int64_t>{cfg.num_kv_heads * cfg.head_dim(), cfg.hidden_size}));
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
  j["rope_parameters"]["rope_type"] = "dynamic";
  EXPECT_THROW(model::model_from_hf_json(j, "x"), runtime::UsageError);
  // Llama-3.1's block in either layout; the same config in transformers 4's rope_scaling.
  j["rope_parameters"] = {{"rope_theta", 500000.0},  {"rope_type", "llama3"},
                          {"factor", 8.0},           {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  const auto l3 = model::model_from_hf_json(j, "x");
  EXPECT_EQ(l3.rope_scaling.type, "llama3");
  EXPECT_EQ(l3.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(model::model_from_hf_json(model::model_to_hf_json(l3), "x").rope_scaling.factor,
            8.0);  // exports keep it
  j["rope_parameters"]["yarn_beta"] = 1;
  EXPECT_THROW(model::model_from_hf_json(j, "x"),
               runtime::UsageError);  // a key llama3 does not have
  j = model::model_to_hf_json(model::model_preset("small"));
  j.erase("hidden_size");
  EXPECT_THROW(model::model_from_hf_json(j, "x"), runtime::UsageError);
}

// transformers writes "torch_dtype", and from 4.56 "dtype"; either names what the weights are
// stored in.
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
  auto a = model::init_param(specs[1], 7, 0.02), b = model::init_param(specs[1], 7, 0.02),
       c = model::init_param(specs[1], 8, 0.02);
  EXPECT_TRUE(a.equal(b));
  EXPECT_FALSE(a.equal(c));
  EXPECT_FALSE(model::init_param(specs[2], 7, 0.02).narrow(0, 0, 1).equal(a.narrow(0, 0, 1)));
  EXPECT_NEAR(a.std().item<double>(), 0.02, 0.002);
  EXPECT_TRUE(model::init_param(specs[8], 7, 0.02).eq(1).all().item<bool>());  // input_layernorm
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
  const std::string ok =
      R"({"vocab_size":512,"hidden_size":64,"intermediate_size":176,"num_hidden_layers":2,"num_attention_heads":4)";
  EXPECT_EQ(model::model_from_hf_text(ok + "}", "c.json").vocab_size, 512);
  EXPECT_EQ(model::model_from_hf_text(ok + R"(,"max_position_embeddings":2048.0})", "c.json")
                .max_position_embeddings,
            2048);
  auto bad = [](const std::string& text, const std::string& want) {
    try {
      model::model_from_hf_text(text, "c.json").validate();
      ADD_FAILURE() << "accepted " << text;
    } catch (const runtime::UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  bad("[1, 2]",
      "c.json: config.json is a JSON array, not an object");  // nlohmann's type_error before
  bad(ok + R"(,"tie_word_embeddings":"no"})", "\"tie_word_embeddings\" must be true or false");
  bad(ok + R"(,"rope_parameters":{"rope_type":3}})", "rope_type must be a string");
  bad(ok + R"(,"max_position_embeddings":1e300})",
      "must be an integer");  // UB as an int64 cast before
  bad(ok + R"(,"max_position_embeddings":"4096"})", "has the wrong type");
  bad(R"({"vocab_size":512,"hidden_size":1099511627776,"intermediate_size":176,"num_hidden_layers":4096,"num_attention_heads":4})",
      "over the 2^50 this build supports");  // num_params() overflowed int64 before
  bad("{\"vocab_size\":", "invalid JSON");
}

// Every config.json field that changes the math is honoured or refused naming the field and its
// value; harmless fields pass quietly; a field nobody listed is returned for a warning.
TEST(Config, FieldsShardtrainDoesNotImplementAreRefusedByNameAndValue) {
  const std::string ok =
      R"({"vocab_size":512,"hidden_size":64,"intermediate_size":176,"num_hidden_layers":2,"num_attention_heads":4)";
  auto refused = [&](const std::string& field, const std::string& value, const std::string& want) {
    try {
      model::model_from_hf_text(ok + ",\"" + field + "\":" + value + "}", "c.json").validate();
      ADD_FAILURE() << "accepted " << field << " = " << value;
    } catch (const runtime::UsageError& e) {
      const std::string line = want.empty() ? "c.json: " + field + ".rope_type is yarn"
                                            : "c.json: " + field + " is " + want;
      EXPECT_NE(std::string(e.what()).find(line), std::string::npos) << e.what();
    }
  };
  refused("hidden_act", R"("gelu_new")", "gelu_new");
  refused("hidden_act", R"("tanh")", "tanh");
  refused("attention_dropout", "0.1", "0.1");
  refused("rope_scaling", R"({"rope_type":"yarn","factor":2.0})",
          "");  // ... rope_scaling.rope_type is yarn
  refused("model_type", R"("gemma")", "gemma");
  try {
    model::model_from_hf_text(ok + R"(,"quantization_config":{"quant_method":"bitsandbytes"}})",
                              "c.json");
    ADD_FAILURE() << "accepted a quantized model";
  } catch (const runtime::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("quantization_config"), std::string::npos) << e.what();
  }
  // transformers' defaults, written out, are accepted; 0 and 0.0 are the same dropout.
  const auto c = model::model_from_hf_text(
      ok + R"(,"attention_bias":false,"mlp_bias":false,"hidden_act":"silu",)"
           R"("attention_dropout":0.0,"rope_scaling":null,"model_type":"llama",)"
           R"("pretraining_tp":1,"use_cache":true,"initializer_range":0.01,"my_field":3})",
      "c.json");
  EXPECT_EQ(c.unknown_fields, std::vector<std::string>{"my_field"});
  EXPECT_EQ(c.initializer_range, 0.01);
}

// A run without --weights draws its init with config.json's initializer_range, as transformers'
// _init_weights.
TEST(Config, InitializerRangeSetsTheSeededInitsStd) {
  model::ModelConfig c = model::model_preset("tiny");
  c.initializer_range = 0.01;
  const auto wide = model::ParamStore::initialize(c, 3);
  const double std = wide.get("model.embed_tokens.weight").std().item<double>();  // 512 x 64 draws
  EXPECT_NEAR(std, 0.01, 0.0005);
}

// docs/models.md's field table is the code's: every field once, with the same use.
TEST(Config, ModelsDocListsEveryFieldWithItsUse) {
  std::ifstream in(std::string(SHARDTRAIN_SOURCE_DIR) + "/docs/models.md");
  ASSERT_TRUE(in) << "docs/models.md";
  std::map<std::string, std::string> doc;
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (line == "<!-- config-fields:begin -->") inside = true;
    if (line == "<!-- config-fields:end -->") inside = false;
    const auto a = line.find("| `");
    const auto b = line.find("` | ");
    if (!inside || a != 0 || b == std::string::npos) continue;
    const auto c = line.find(" |", b + 4);
    doc[line.substr(3, b - 3)] = line.substr(b + 4, c - b - 4);
  }
  const std::map<model::FieldUse, std::string> use = {{model::FieldUse::kRead, "read"},
                                                      {model::FieldUse::kHarmless, "harmless"},
                                                      {model::FieldUse::kChecked, "checked"}};
  for (const auto& f : model::config_fields()) {
    EXPECT_EQ(doc.count(f.name), 1u) << f.name << " is missing from docs/models.md";
    EXPECT_EQ(doc[f.name], use.at(f.use)) << f.name;
  }
  EXPECT_EQ(doc.size(), model::config_fields().size())
      << "docs/models.md lists a field the code does not";
}

// What a config.json of each new family leaves out takes the family's default, as its config class
// does; what it gives is read where the family reads it.
TEST(Config, FamilyDefaultsAndFieldsAsTheirConfigClassesReadThem) {
  const nlohmann::json base = {{"hidden_size", 64},        {"intermediate_size", 176},
                               {"num_hidden_layers", 6},   {"num_attention_heads", 4},
                               {"num_key_value_heads", 2}, {"vocab_size", 512}};
  auto read = [&](const char* type, nlohmann::json extra) {
    nlohmann::json j = base;
    j["model_type"] = type;
    j.update(extra);
    return model::model_from_hf_json(j, type);
  };
  const auto qwen3 = read("qwen3", {{"attention_bias", true}});
  EXPECT_EQ(qwen3.head_dim(), 128);  // Qwen3Config's head_dim, not hidden / heads
  EXPECT_DOUBLE_EQ(qwen3.rms_norm_eps, 1e-6);
  EXPECT_EQ(qwen3.pad_token_id, -1);
  EXPECT_EQ(model::llama_param_specs(qwen3)[1].name, "model.layers.0.self_attn.q_proj.weight");
  int biases = 0;
  for (const auto& s : model::llama_param_specs(qwen3)) biases += s.is_bias;
  EXPECT_EQ(biases, 4 * 6);  // q k v o in every layer
  const auto olmo2 = read("olmo2", nlohmann::json::object());
  EXPECT_EQ(olmo2.pad_token_id, 1);
  const auto gemma2 = read("gemma2", {{"head_dim", 16}});
  EXPECT_DOUBLE_EQ(gemma2.attn_softcap, 50.0);
  EXPECT_DOUBLE_EQ(gemma2.final_softcap, 30.0);
  EXPECT_EQ(gemma2.hidden_act, "gelu_pytorch_tanh");
  EXPECT_DOUBLE_EQ(gemma2.query_scale(), std::sqrt(16.0 / 256.0));
  EXPECT_EQ(gemma2.attention_window(0), 4096);  // sliding, global, sliding, ...
  EXPECT_EQ(gemma2.attention_window(1), 0);
  const auto uncapped =
      read("gemma2", {{"attn_logit_softcapping", nullptr}, {"final_logit_softcapping", nullptr}});
  EXPECT_EQ(uncapped.attn_softcap, 0.0);  // null is no cap; absent is the default
  EXPECT_EQ(uncapped.final_softcap, 0.0);
  // Gemma 3 in transformers 4's layout: rope_theta, rope_local_base_freq and the pattern.
  const auto gemma3 =
      read("gemma3_text", {{"head_dim", 16},
                           {"rope_theta", 500000.0},
                           {"rope_local_base_freq", 100.0},
                           {"sliding_window_pattern", 3},
                           {"rope_scaling", {{"rope_type", "linear"}, {"factor", 8.0}}},
                           {"pad_token_id", -1}});
  EXPECT_DOUBLE_EQ(gemma3.rope_theta, 500000.0);
  EXPECT_DOUBLE_EQ(gemma3.rope_local_theta, 100.0);
  EXPECT_EQ(gemma3.rope_scaling.type, "linear");
  EXPECT_TRUE(gemma3.sliding_layer(0) && gemma3.sliding_layer(1) && !gemma3.sliding_layer(2));
  EXPECT_EQ(gemma3.pad_token_id, 511);  // nn.Embedding counts a negative padding_idx from the end
  // ... and in transformers 5's: RoPE by layer type.
  const auto nested = read(
      "gemma3_text", {{"rope_parameters",
                       {{"full_attention", {{"rope_type", "default"}, {"rope_theta", 1e6}}},
                        {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 1e4}}}}}});
  EXPECT_DOUBLE_EQ(nested.rope_theta, 1e6);
  EXPECT_DOUBLE_EQ(nested.rope_local_theta, 1e4);
  // Norms by family: OLMo 2 after the blocks, Gemma around them, (1 + w) norms initialised to 0.
  int gemma_norms = 0;
  for (const auto& s : model::llama_param_specs(gemma3))
    if (s.is_norm && s.name.rfind("model.layers.0.", 0) == 0) {
      ++gemma_norms;
      EXPECT_TRUE(model::init_param(s, 1, 0.02).eq(0).all().item<bool>()) << s.name;
    }
  EXPECT_EQ(gemma_norms, 6);  // q, k, and four around the blocks
  // Phi-3: q k v and gate up are one checkpoint tensor each; partial rotary from either place.
  const auto phi3 = read("phi3", {{"partial_rotary_factor", 0.75}, {"head_dim", 32}});
  EXPECT_EQ(phi3.rotary_dim(), 24);
  EXPECT_EQ(phi3.pad_token_id, 32000);  // Phi3Config's default: outside this 512-token vocabulary,
  EXPECT_THROW(phi3.validate(), runtime::UsageError);  // which nn.Embedding refuses too
  const auto specs = model::llama_param_specs(phi3);
  EXPECT_EQ(specs[1].name, "model.layers.0.self_attn.qkv_proj.weight");
  EXPECT_EQ(specs[1].shape, (std::vector<int64_t>{(4 + 2 * 2) * 32, 64}));
  EXPECT_THROW(read("llama", {{"partial_rotary_factor", 0.5}}), runtime::UsageError);
  for (const char* preset : {"qwen3-8b", "olmo2-7b", "gemma3-12b", "phi4-mini"})
    EXPECT_NO_THROW(model::model_preset(preset).validate()) << preset;
  // Qwen/Qwen3-8B's model card: 8.2B parameters, 6.95B of them not embeddings (the head untied).
  const auto q8 = model::model_preset("qwen3-8b");
  EXPECT_NEAR(static_cast<double>(q8.num_params()), 8.2e9, 0.05e9);
  EXPECT_NEAR(static_cast<double>(q8.num_params() - 2 * q8.num_embedding_params()), 6.95e9,
              0.005e9);
}
