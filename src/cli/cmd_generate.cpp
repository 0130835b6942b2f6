// `shardtrain generate`: greedy or top-p decoding through the FSDP engine. Every rank decodes
// the same prompt (each forward is collective); rank 0 prints the answers to stdout and its log
// lines to stderr, so that `generate ... > answer.txt` holds the answers alone.
#include <iostream>

#include "shardtrain/cli/commands.h"
#include "shardtrain/cli/engine_setup.h"
#include "shardtrain/cli/options.h"
#include "shardtrain/cli/run_checks.h"
#include "shardtrain/data/instruction.h"
#include "shardtrain/data/tokenizer.h"
#include "shardtrain/model/generate.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/logging.h"

namespace shardtrain::cli {

int cmd_generate(const std::vector<std::string>& args, runtime::MpiEnv& env) {
  std::string help;
  GenerateOptions o = runtime::parse_on_every_rank([&] { return parse_generate(args, &help); });
  if (o.common.wants_help()) return print_help(help, env);
  env.set_ranks_per_node(o.fsdp.ranks_per_node);
  setup_threads(o.common.threads, env);
  exports::check_tokenizers({o.weights, o.tokenizer, ""}, {}, o.tokenizer, o.model, env);
  data::Tokenizer tok(o.tokenizer);
  tok.require_fits(o.model.vocab_size);  // every rank reads the same file: all throw alike
  model::GenerateConfig g;
  g.max_new_tokens = o.max_new_tokens;
  g.temperature = o.temperature;
  g.top_p = o.top_p;
  g.seed = o.seed;
  g.stop_ids = tok.stop_ids();
  g.max_context = o.model.max_position_embeddings;
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& p :
       o.prompts) {  // all checked before the weights load; every rank encodes alike
    prompts.push_back(
        tok.encode(o.template_name == "alpaca" ? data::alpaca_prompt(p, o.input) : p));
    if (static_cast<int64_t>(prompts.back().size()) >= g.max_context)
      throw runtime::AgreedUsageError("--prompt is " + std::to_string(prompts.back().size()) +
                                      " tokens, but the model takes at most " +
                                      std::to_string(g.max_context) +
                                      " (max_position_embeddings), prompt and answer together; "
                                      "shorten the prompt");
  }
  if (o.context_parallel != 1)  // one token at a time: there is no sequence to split
    throw runtime::UsageError(
        "--context-parallel applies to train and eval; generate decodes whole prompts on each "
        "rank (drop the option)");
  EngineSetup setup(o.model, o.fsdp, o.run, o.context_parallel, env, o.weights, o.seed, o.adapter);
  const model::LogitsFn logits = [&](const at::Tensor& t) { return setup.engine->logits(t); };
  for (const auto& prompt : prompts) {
    const auto out = model::generate(logits, prompt, g);
    if (model::stopped_at_context_limit(prompt.size(), out.size(), g))
      runtime::log::info("the answer stopped after " + std::to_string(out.size()) +
                         " tokens at the model's limit of " + std::to_string(g.max_context) +
                         " positions (max_position_embeddings), prompt included");
    if (env.rank() == 0) std::cout << tok.decode(out) << std::endl;
  }
  return 0;
}

}  // namespace shardtrain::cli
