#include "shardtrain/cli/run_params.h"

#include "shardtrain/ckpt/checkpoint_attrs.h"
#include "shardtrain/spec/spec_options.h"

namespace shardtrain::cli {
train::RunParams run_params(const TrainOptions& o, int world_size, int64_t global_batch,
                            int64_t seq_len, int64_t num_params, const std::string& device) {
  const auto& s = o.optim.schedule;
  const auto& ac = o.fsdp.activation_checkpointing;
  nlohmann::json v = {{"model", o.model.name},
                      {"num_params", num_params},
                      {"lr", s.base_lr},
                      {"lr_schedule", s.kind},
                      {"warmup_steps", s.warmup_steps},
                      {"min_lr_ratio", s.min_lr_ratio},
                      {"weight_decay", o.optim.adamw.weight_decay},
                      {"beta1", o.optim.adamw.beta1},
                      {"beta2", o.optim.adamw.beta2},
                      {"adam_eps", o.optim.adamw.eps},
                      {"grad_clip", o.optim.grad_clip},
                      {"batch_size", o.train.batch_size},
                      {"grad_accum", o.train.grad_accum},
                      {"global_batch", global_batch},
                      {"seq_len", seq_len},
                      {"steps", o.train.steps},
                      {"epochs", o.train.epochs},
                      {"seed", o.train.seed},
                      {"world_size", world_size},
                      {"device", device},
                      {"sharding", fsdp::sharding_name(o.fsdp.sharding)},
                      {"param_dtype", spec::dtype_name(o.fsdp.param_dtype)},
                      {"reduce_dtype", spec::dtype_name(o.fsdp.reduce_dtype)},
                      {"activation_checkpointing", fsdp::recompute_name(ac.mode)},
                      {"data", o.data}};
  if (s.kind == "steplr") v["gamma"] = s.gamma;
  if (ac) v["ac_every"] = ac.every;
  v.update(ckpt::adapter_params(o.run.adapters));
  return {v, o.args, o.option_values};
}

}  // namespace shardtrain::cli
