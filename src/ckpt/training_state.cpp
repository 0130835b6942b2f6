#include "shardtrain/ckpt/training_state.h"

#include <memory>

#include "shardtrain/ckpt/checkpoint_attrs.h"
#include "shardtrain/ckpt/crc_assembly.h"
#include "shardtrain/model/config_fields.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/logging.h"

namespace shardtrain::ckpt {
namespace {

std::vector<TensorSpec> dataset_specs(const fsdp::FsdpEngine& engine) {
  std::vector<TensorSpec> out;
  for (const auto& s : engine.layout().trainable_specs()) out.push_back({s.name, s.shape});
  return out;
}

// A value a state reads back must not be negative: a damaged file, named with the key.
int64_t non_negative(const Values& saved, const std::string& key) {
  const int64_t v = saved.get_int(key);
  if (v < 0)
    throw runtime::Error(saved.origin() + ": negative " + key + "; the checkpoint is damaged");
  return v;
}

// The engine's trainable shards (a LoRA run's adapters), as fp32 master weights; also the
// layout at save time (information only) and the model's config, which a resume must match.
class ModelShards : public Stateful {
 public:
  ModelShards(fsdp::FsdpEngine& engine, int world_size, optim::Optimizer& optimizer)
      : engine_(engine), world_size_(world_size), optimizer_(optimizer) {}
  std::string name() const override { return "model"; }
  std::vector<TensorGroup> tensors() override {
    optimizer_.settle();  // --cpu-offload: the host's steps in flight write these
    TensorGroup g{kTensorGroups[0], dataset_specs(engine_), {}};
    for (const auto& p : engine_.layout().pieces())
      g.slices.push_back({p.name, p.param_offset, p.numel, p.master});
    return {g};
  }
  void save_values(Values& out) const override {
    out.set_int(attr::kWorldSize, world_size_);
    out.set_text(attr::kSharding, fsdp::sharding_name(engine_.spec().sharding.sharding));
    out.set_json(attr::kModelConfig, model::model_to_hf_json(engine_.spec().model));
  }
  // Another model's checkpoint: refused with both shapes named, before any tensor is read (an
  // older checkpoint in the same directory would be just as wrong, so auto does not skip it).
  void check(const Values& saved) const override {
    const nlohmann::json config = saved.get_json(attr::kModelConfig);
    const std::string path = saved.origin();
    model::ModelConfig model;
    try {
      model = model::model_from_hf_json(config, path);
    } catch (const std::exception& e) {
      throw runtime::UsageError(path + ": its model_config attribute cannot be read (" + e.what() +
                                "); the checkpoint is damaged");
    }
    const model::ModelConfig& mine = engine_.spec().model;
    if (!model::same_shape(model, mine))
      throw ResumeRefused(
          "--resume: " + path + " holds a model of shape " + model::describe_shape(model) +
          " but --model " + mine.name + " has " + model::describe_shape(mine) +
          "; resume with the model it was saved from, or use another --checkpoint-dir");
    // The same shapes with other math (a sliding window, RoPE, biases, another family) would train
    // on silently.
    const auto changed =
        model::changed_fields(model::model_to_hf_json(model), model::model_to_hf_json(mine));
    if (!changed.empty()) {
      std::string list;
      for (const auto& c : changed) list += (list.empty() ? "" : ", ") + c;
      throw ResumeRefused(
          "--resume: " + path + " was saved from another model config than --model " + mine.name +
          "'s (" + list +
          "); resume with the model it was saved from, or use another --checkpoint-dir");
    }
  }

 private:
  fsdp::FsdpEngine& engine_;
  int world_size_;
  optim::Optimizer& optimizer_;  // owns the host's steps in flight (--cpu-offload)
};

// AdamW's moments for the engine's shards (make_optimizer's slot order) and its step count.
class OptimizerState : public Stateful {
 public:
  OptimizerState(fsdp::FsdpEngine& engine, optim::Optimizer& optimizer)
      : engine_(engine), optimizer_(optimizer) {}
  std::string name() const override { return "optimizer"; }
  std::vector<TensorGroup> tensors() override {
    optimizer_.settle();
    const auto& pieces = engine_.layout().pieces();
    auto& slots = optimizer_.adamw().slots();
    if (slots.size() != pieces.size())
      throw runtime::Error("checkpoint: the optimizer does not hold this engine's shards");
    TensorGroup avg{kTensorGroups[1], dataset_specs(engine_), {}};
    TensorGroup avg_sq{kTensorGroups[2], avg.datasets, {}};
    for (size_t i = 0; i < pieces.size(); ++i) {
      const auto& p = pieces[i];
      avg.slices.push_back({p.name, p.param_offset, p.numel, slots[i].exp_avg});
      avg_sq.slices.push_back({p.name, p.param_offset, p.numel, slots[i].exp_avg_sq});
    }
    return {avg, avg_sq};
  }
  void save_values(Values& out) const override {
    optimizer_.settle();
    out.set_int(attr::kAdamStep, optimizer_.adamw().step_count());
  }
  void load_values(const Values& saved) override {
    optimizer_.adamw().set_step_count(non_negative(saved, attr::kAdamStep));
  }

 private:
  fsdp::FsdpEngine& engine_;
  optim::Optimizer& optimizer_;
};

// Optimizer steps done; also the LR schedule's position.
class TrainStep : public Stateful {
 public:
  explicit TrainStep(TrainState& state) : state_(state) {}
  std::string name() const override { return "train_step"; }
  void save_values(Values& out) const override { out.set_int(attr::kStep, state_.step); }
  void load_values(const Values& saved) override { state_.step = non_negative(saved, attr::kStep); }

 private:
  TrainState& state_;
};

// The data loader's next position in rows of its epoch, the schedule's reference batch and total,
// and what the data was: a resume continues at the next unread row at any global batch, and is
// refused on another seed or token file unless --allow-data-change. Files before rows kept the
// step: its rows are the step times the global batch (the saver's when recorded, else this run's).
class LoaderPosition : public Stateful {
 public:
  explicit LoaderPosition(TrainState& state) : state_(state) {}
  std::string name() const override { return "data_loader"; }
  void save_values(Values& out) const override {
    out.set_int(attr::kLoaderEpoch, state_.loader.epoch);
    out.set_int(attr::kLoaderRow, state_.loader.row);
    out.set_int(attr::kGlobalBatch, state_.global_batch);
    out.set_int(attr::kScheduleBatch, state_.schedule_batch);
    out.set_int(attr::kScheduleSteps, state_.schedule_steps);
    out.set_int(attr::kDataSeed, static_cast<int64_t>(state_.data.seed));
    out.set_text(attr::kDataFile, state_.data.token_file);
    out.set_int(attr::kDataRows, state_.data.rows);
  }
  void check(const Values& saved) const override {
    if (!saved.has(attr::kDataSeed)) return;     // an older file: nothing recorded to compare
    if (state_.data.token_file.empty()) return;  // a reader (convert): it trains on no data
    const data::DataIdentity was{static_cast<uint64_t>(saved.get_int(attr::kDataSeed)),
                                 saved.get_text(attr::kDataFile), saved.get_int(attr::kDataRows)};
    const std::string change = data::describe_change(was, state_.data);
    if (change.empty()) return;
    if (!state_.allow_data_change)
      throw ResumeRefused("--resume: " + saved.origin() + " was trained with " + change +
                          "; resume with the same --seed and --data, or pass --allow-data-change "
                          "to continue on this data "
                          "from the same position");
    runtime::log::warn_once("--allow-data-change: " + saved.origin() + " was trained with " +
                            change + "; continuing from its position in rows on this run's data");
  }
  // 0 (or absent) where the saver did not train: convert's checkpoints of a Hugging Face model.
  void load_values(const Values& saved) override {
    const auto known = [&saved](const char* key, int64_t otherwise) {
      const int64_t v = saved.has(key) ? non_negative(saved, key) : 0;
      return v > 0 ? v : otherwise;
    };
    const int64_t saver_batch = known(attr::kGlobalBatch, state_.global_batch);
    const int64_t row = saved.has(attr::kLoaderRow)
                            ? non_negative(saved, attr::kLoaderRow)
                            : non_negative(saved, attr::kLoaderStep) * saver_batch;
    state_.loader = {non_negative(saved, attr::kLoaderEpoch), row};
    state_.saved_global_batch = saver_batch;
    state_.schedule_batch = known(attr::kScheduleBatch, saver_batch);
    state_.schedule_steps = known(attr::kScheduleSteps, 0);
  }

 private:
  TrainState& state_;
};

// The command line of the run that saved, for people and for convert, and its optimizer and
// schedule settings: a resume that changes one applies it, saying so in one line each.
class RunConfig : public Stateful {
 public:
  explicit RunConfig(TrainState& state) : state_(state) {}
  std::string name() const override { return "run_config"; }
  void save_values(Values& out) const override {
    out.set_json(attr::kRunConfig, state_.run_config);
  }
  void check(const Values& saved) const override {
    // Older files and convert's runs record no settings: nothing to compare.
    const auto settings = [](const nlohmann::json& run) {
      const nlohmann::json s = run.is_object() ? run.value("optimizer", nlohmann::json::object())
                                               : nlohmann::json::object();
      return s.is_object() ? s : nlohmann::json::object();
    };
    const nlohmann::json saved_run = saved.get_json(attr::kRunConfig);
    const nlohmann::json before = settings(saved_run), now = settings(state_.run_config);
    const auto text = [](const nlohmann::json& v) {
      return v.is_string() ? v.get<std::string>() : v.dump();
    };
    // DPO's reference (cli::reference_identity): another one makes another objective.
    const auto reference = [](const nlohmann::json& run) {
      return run.is_object() ? run.value("reference", std::string()) : std::string();
    };
    const std::string was = reference(saved_run), is = reference(state_.run_config);
    if (!was.empty() && !is.empty() && was != is)
      throw ResumeRefused("--resume: " + saved.origin() + " was trained by DPO against " + was +
                          ", but this run's reference is " + is +
                          ": its rewards and losses would be another objective's; resume with "
                          "the same reference, or use another --checkpoint-dir");
    for (const auto& [name, value] : now.items()) {
      if (!before.contains(name) || before[name] == value) continue;
      runtime::log::warn_once("--" + name + " is " + text(value) + " in this run but was " +
                              text(before[name]) + " in the run that saved " + saved.origin() +
                              "; resuming with " + text(value));
    }
  }

 private:
  TrainState& state_;
};

// A LoRA run's adapter settings and the frozen base they were trained on. A file without
// lora_rank is a full fine-tune's; a resume with other settings or on another base is refused.
class LoraBase : public Stateful {
 public:
  LoraBase(fsdp::FsdpEngine& engine, std::string base_weights, int64_t base_crc)
      : engine_(engine), base_weights_(std::move(base_weights)), base_crc_(base_crc) {}
  std::string name() const override { return "lora"; }
  void save_values(Values& out) const override {
    const auto& l = engine_.spec().plan.adapters;
    if (!l.enabled()) return;
    put_adapters(out, l);
    out.set_text(attr::kBaseWeights, base_weights_);
    out.set_int(attr::kBaseCrc32, base_crc_);
  }
  void check(const Values& saved) const override {
    const std::string path = saved.origin();
    const int64_t rank = saved.has(attr::kLoraRank) ? non_negative(saved, attr::kLoraRank) : 0;
    const std::string targets = rank > 0 ? saved.get_text(attr::kLoraTargets) : "";
    const auto& l = engine_.spec().plan.adapters;
    if (rank != l.rank || (rank > 0 && targets != model::join_lora_targets(l.targets)))
      throw ResumeRefused("--resume: " + path + " holds " +
                          (rank > 0 ? "LoRA rank " + std::to_string(rank) + " on " + targets
                                    : std::string("a full fine-tune")) +
                          " but this run asks for " +
                          (l.enabled() ? "LoRA rank " + std::to_string(l.rank) + " on " +
                                             model::join_lora_targets(l.targets)
                                       : std::string("a full fine-tune")) +
                          "; resume with the checkpoint's --lora-* options");
    if (rank == 0) return;
    const int64_t saved_crc = saved.get_int(attr::kBaseCrc32);
    if (saved_crc == base_crc_) return;
    const std::string base = saved.get_text(attr::kBaseWeights);
    throw ResumeRefused("--resume: " + path + " was trained on base weights " +
                        (base.empty() ? "(seeded init)" : base) + " (CRC-32 " +
                        std::to_string(saved_crc) + ") but this run's base has CRC-32 " +
                        std::to_string(base_crc_) +
                        "; pass the same --weights as the run that saved it");
  }

 private:
  fsdp::FsdpEngine& engine_;
  std::string base_weights_;
  int64_t base_crc_;
};

}  // namespace

int64_t base_crc32(fsdp::FsdpEngine& engine, const comm::ParallelDims& dims) {
  const auto specs = model::llama_param_specs(engine.spec().model);
  const auto per_tensor = assemble_crcs(dims.shard->mpi(), engine.layout().base_crc_rows());
  std::vector<runtime::CrcRow> tensors;  // the parameters one after another, as one fp32 buffer
  int64_t offset = 0;
  for (size_t d = 0; d < specs.size(); ++d) {
    tensors.push_back({offset, specs[d].numel(), per_tensor[d]});
    offset += specs[d].numel();
  }
  return runtime::combine_crc_rows(std::move(tensors), sizeof(float));
}

StateRegistry training_state(fsdp::FsdpEngine& engine, const comm::ParallelDims& g,
                             optim::Optimizer& optimizer, TrainState& state,
                             const std::string& base_weights, bool checksum_base) {
  Ranks ranks;
  ranks.world = g.world->mpi();
  ranks.shard = g.shard->mpi();
  ranks.writer =
      g.layout.replicate_rank == 0;  // one replica writes: its shard group holds every byte once
  ranks.shard_rank = g.layout.shard_rank;
  StateRegistry reg(ranks);
  reg.emplace<ModelShards>(engine, g.world->size(), optimizer);
  reg.emplace<OptimizerState>(engine, optimizer);
  reg.emplace<TrainStep>(state);
  reg.emplace<LoaderPosition>(state);
  reg.emplace<RunConfig>(state);
  reg.emplace<LoraBase>(
      engine, base_weights,
      engine.layout().base_frozen() && checksum_base ? base_crc32(engine, g) : -1);  // collective
  return reg;
}

}  // namespace shardtrain::ckpt
