// `shardtrain eval`: loss/perplexity on a token file (DPO's loss and metrics on preference pairs)
// and exact match on prompt/answer records, through the FSDP engine on any device, strategy and
// number of ranks.
#include <ATen/ATen.h>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "shardtrain/io/h5.h"

#include "shardtrain/cli/commands.h"
#include "shardtrain/cli/engine_setup.h"
#include "shardtrain/cli/options.h"
#include "shardtrain/cli/run_checks.h"
#include "shardtrain/obs/prometheus.h"
#include "shardtrain/train/dpo_reference.h"

namespace shardtrain::cli {
namespace {

// Every rank runs the same first rows (the gathers are collective); rank 0 writes tokens [B, T]
// as int32 (and a packed file's position_ids), and logits as fp32 [B*T, vocab], with the shape in
// attributes.
void save_logits(const std::string& path, fsdp::FsdpEngine& engine, const data::TokenFile& data,
                 int64_t batch, int rank) {
  std::vector<int64_t> rows(std::min(batch, data.rows()));
  std::iota(rows.begin(), rows.end(), 0);
  const model::Batch b = data.read(rows);
  const at::Tensor logits =
      engine.logits(b.tokens, b.positions).to(at::kFloat).contiguous();  // [B, T, V]
  if (rank != 0) return;
  const at::Tensor tokens = b.tokens.to(at::kInt).contiguous();
  const int64_t n = tokens.size(0), t = tokens.size(1), v = logits.size(2);
  auto file = io::h5::create_file(path);
  io::h5::write_matrix(
      file, "tokens",
      std::vector<int32_t>(tokens.data_ptr<int32_t>(), tokens.data_ptr<int32_t>() + n * t), n, t);
  io::h5::write_matrix(
      file, "logits",
      std::vector<float>(logits.data_ptr<float>(), logits.data_ptr<float>() + n * t * v), n * t, v);
  if (b.positions.defined()) {
    const at::Tensor pos = b.positions.to(at::kInt).contiguous();
    io::h5::write_matrix(
        file, "position_ids",
        std::vector<int32_t>(pos.data_ptr<int32_t>(), pos.data_ptr<int32_t>() + n * t), n, t);
  }
  io::h5::write_attr(file, "rows", n);
  io::h5::write_attr(file, "seq_len", t);
  io::h5::write_attr(file, "vocab_size", v);
}

}  // namespace

int cmd_eval(const std::vector<std::string>& args, runtime::MpiEnv& env) {
  std::string help;
  EvalOptions o = runtime::parse_on_every_rank([&] { return parse_eval(args, &help); });
  if (o.common.wants_help()) return print_help(help, env);
  env.set_ranks_per_node(o.fsdp.ranks_per_node);
  setup_threads(o.common.threads, env);
  check_groups(o.fsdp, o.context_parallel, env);
  exports::check_tokenizers({o.weights, o.accuracy.tokenizer, ""}, {o.data},
                            o.accuracy.file.empty() ? "" : o.accuracy.tokenizer, o.model, env);
  auto data = o.data.empty() ? nullptr : data::open_token_file("--data", o.data, o.model, env);
  // A preference file's next-token loss over chosen and rejected answers alike means nothing.
  train::check_objective_data(o.preference.enabled, {{"--data", data.get()}},
                              o.save_logps.empty()
                                  ? "evaluate them with --objective dpo, or write their "
                                    "log-probabilities with --save-logps"
                                  : nullptr);
  auto accuracy = train::load_accuracy_task(o.accuracy, o.model);
  EngineSetup setup(o.model, o.fsdp, o.run, o.context_parallel, env, o.weights, /*seed=*/0,
                    o.adapter);  // every weight is read: no init to seed
  // --batch-size counts rows across all ranks (a context group's ranks share theirs), so any
  // world size reads the same batches.
  const int64_t data_world = setup.groups.data_world();
  const int64_t per_rank = (o.batch_size + data_world - 1) / data_world;
  train::Validator validator(*setup.engine, setup.groups, data.get(), accuracy.get(), per_rank,
                             o.max_batches);
  nlohmann::json j;
  std::string line;
  if (data && o.preference.enabled) {
    std::string reference;
    validator.set_dpo(std::make_unique<train::DpoObjective>(
        o.preference.cfg,
        train::eval_reference(o.preference.reference_logps, *setup.engine, setup.groups, *data,
                              &reference),
        *setup.groups.context));
    const model::PreferenceMetrics r = validator.preference();
    j["loss"] = r.loss;
    j["pairs"] = r.pairs;
    line += "DPO loss " + std::to_string(r.loss) + " | pairs " + std::to_string(r.pairs);
    for (int k = 0; k < obs::kNumPreferenceMetrics; ++k) {
      j[obs::kPreferenceMetricNames[k]] = r.values[k];
      line +=
          std::string(" | ") + obs::kPreferenceMetricNames[k] + " " + std::to_string(r.values[k]);
    }
    line += "\nreference: " + reference;
  } else if (data && !data->preference()) {
    const auto r = validator.loss();
    j["loss"] = r.loss;
    j["perplexity"] = r.perplexity;
    j["tokens"] = r.tokens;
    line += "loss " + std::to_string(r.loss) + " | perplexity " + std::to_string(r.perplexity) +
            " | tokens " + std::to_string(r.tokens);
  }
  if (accuracy) {
    const auto r = validator.accuracy();
    j["exact_match"] = r.exact_match;
    j["correct"] = r.correct;
    j["total"] = r.total;
    line += std::string(line.empty() ? "" : " | ") + "exact_match " +
            std::to_string(100.0 * r.exact_match) + "% (" + std::to_string(r.correct) + "/" +
            std::to_string(r.total) + ")";
    for (const auto& e : r.examples) line += "\n  answer " + e;
  }
  if (!o.save_logps.empty()) {
    train::save_logps(o.save_logps, *setup.engine, setup.groups, *data, per_rank, env.rank());
    j["logps_file"] = o.save_logps;  // the JSON line says what was written, never null
    j["rows"] = data->rows();
    line += std::string(line.empty() ? "" : "\n") + "answer log-probabilities of " +
            std::to_string(data->rows()) + " rows -> " + o.save_logps;
  }
  if (!o.save_logits.empty()) {
    save_logits(o.save_logits, *setup.engine, *data, o.batch_size, env.rank());
    line += "\nlogits of the first " + std::to_string(std::min(o.batch_size, data->rows())) +
            " rows -> " + o.save_logits;
  }
  if (env.rank() == 0) std::cout << j.dump() << "\n" << line << std::endl;
  return 0;
}

}  // namespace shardtrain::cli
