// `shardtrain generate`: batched decoding with a KV cache. The FSDP engine gathers the whole model
// once; then each rank decodes its own share of the rows (row r on rank r % world) with no
// collective, and rank 0 gathers the completions: printed to stdout (its log lines go to stderr,
// so that `generate ... > answers.txt` holds the answers alone) or written to --output as JSONL.
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "shardtrain/cli/commands.h"
#include "shardtrain/cli/engine_setup.h"
#include "shardtrain/cli/options.h"
#include "shardtrain/cli/run_checks.h"
#include "shardtrain/data/chat.h"
#include "shardtrain/data/chat_tokenize.h"
#include "shardtrain/data/instruction.h"
#include "shardtrain/data/tokenizer.h"
#include "shardtrain/model/generate.h"
#include "shardtrain/obs/rank_summary.h"
#include "shardtrain/runtime/atomic_write.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/logging.h"

namespace shardtrain::cli {

namespace {

// --input's prompts: text encoded as the tokenizer encodes it, messages rendered by the chat
// template with its generation prompt. Throws UsageError naming the file and line.
std::vector<std::vector<int32_t>> read_prompts(const GenerateOptions& o,
                                               const data::Tokenizer& tok) {
  std::ifstream in(o.input);
  std::vector<std::vector<int32_t>> out;
  std::unique_ptr<data::ChatEncoder> chat;
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = "--input " + o.input + " line " + std::to_string(n) + ": ";
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw runtime::UsageError(where + "not JSON (" + e.what() + ")");
    }
    if (j.contains("prompt") && j["prompt"].is_string()) {
      out.push_back(tok.encode(j["prompt"].get<std::string>()));
      continue;
    }
    if (!data::is_chat_record(j))
      throw runtime::UsageError(where + "needs \"prompt\" (a string) or \"messages\"");
    const data::ChatParse c = data::parse_chat(j);
    if ((!c.ok && (c.fatal || c.reason != "no assistant turn")) || c.messages.empty() ||
        c.messages.back().role != data::ChatRole::kUser)
      throw runtime::UsageError(where + "the messages must end with a user message" +
                                (c.detail.empty() ? "" : " (" + c.detail + ")"));
    if (!chat) {
      data::ChatTemplate t = data::parse_chat_template(o.chat_template);
      if (t == data::ChatTemplate::kAuto) t = data::detect_chat_template(tok.path());
      chat = std::make_unique<data::ChatEncoder>(tok, t);
    }
    out.push_back(chat->encode(c.messages, false, /*add_generation_prompt=*/true).sample.ids);
  }
  return out;
}

std::vector<std::vector<int32_t>> encode_prompts(const GenerateOptions& o,
                                                 const data::Tokenizer& tok, int64_t max_context) {
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& p : o.prompts)
    prompts.push_back(
        tok.encode(o.template_name == "alpaca" ? data::alpaca_prompt(p, o.alpaca_input) : p));
  if (!o.input.empty())
    for (auto& p : read_prompts(o, tok)) prompts.push_back(std::move(p));
  for (size_t i = 0; i < prompts.size(); ++i)
    if (static_cast<int64_t>(prompts[i].size()) >= max_context)
      throw runtime::UsageError(
          "prompt " + std::to_string(i) + " is " + std::to_string(prompts[i].size()) +
          " tokens, but the model takes at most " + std::to_string(max_context) +
          " (max_position_embeddings), prompt and answer together; "
          "shorten the prompt");
  return prompts;
}

}  // namespace

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
  g.top_k = o.top_k;
  g.top_p = o.top_p;
  g.seed = o.seed;
  g.stop_ids = tok.stop_ids();
  for (const auto& s : o.stops) g.stop_tokens.push_back(tok.encode(s, /*add_bos=*/false));
  g.max_context = o.model.max_position_embeddings;
  g.batch = o.generate_batch;
  std::vector<std::vector<int32_t>> prompts;
  try {  // all checked before the weights load; every rank encodes alike
    prompts = encode_prompts(o, tok, g.max_context);
  } catch (const runtime::UsageError& e) {
    throw runtime::AgreedUsageError(e.what());
  }
  if (o.context_parallel != 1)  // one token at a time: there is no sequence to split
    throw runtime::UsageError(
        "--context-parallel applies to train and eval; generate decodes whole prompts on each "
        "rank (drop the option)");
  EngineSetup setup(o.model, o.fsdp, o.run, o.context_parallel, env, o.weights, o.seed, o.adapter);
  const model::Decoder decoder = setup.engine->decoder();  // collective: the last one
  // Row r = prompt r / num_samples, sample r % num_samples; this rank's rows, its seeds.
  const auto rows = static_cast<int64_t>(prompts.size()) * o.num_samples;
  std::vector<int64_t> mine;
  std::vector<std::vector<int32_t>> my_prompts;
  std::vector<uint64_t> seeds;
  for (int64_t r = env.rank(); r < rows; r += env.size()) {
    mine.push_back(r);
    my_prompts.push_back(prompts[static_cast<size_t>(r / o.num_samples)]);
    seeds.push_back(model::row_seed(o.seed, static_cast<uint64_t>(r)));
  }
  const auto done = model::generate(decoder, my_prompts, seeds, g);
  nlohmann::json lines = nlohmann::json::array();
  for (size_t i = 0; i < done.size(); ++i) {
    const model::Completion& c = done[i];
    if (c.stop == model::StopReason::kContext)
      runtime::log::info("row " + std::to_string(mine[i]) + " stopped after " +
                         std::to_string(c.ids.size()) + " tokens at the model's limit of " +
                         std::to_string(g.max_context) +
                         " positions (max_position_embeddings), prompt included");
    nlohmann::json j = {{"index", mine[i]},
                        {"prompt_index", mine[i] / o.num_samples},
                        {"sample", mine[i] % o.num_samples},
                        {"completion", tok.decode(c.ids)},
                        {"ids", c.ids},
                        {"stop", model::stop_reason_name(c.stop)}};
    if (o.logprobs) j["logprobs"] = c.logprobs;
    lines.push_back(std::move(j));
  }
  // Every rank's rows to rank 0, in row order.
  const auto all = obs::allgather_strings(lines.dump(), MPI_COMM_WORLD);
  if (env.rank() != 0) return 0;
  std::vector<nlohmann::json> ordered(static_cast<size_t>(rows));
  for (const auto& part : all)
    for (auto& j : nlohmann::json::parse(part)) {
      const auto at = j["index"].get<size_t>();  // before the move: operator= takes by value
      ordered[at] = std::move(j);
    }
  if (o.output.empty()) {
    for (const auto& j : ordered) std::cout << j["completion"].get<std::string>() << std::endl;
    return 0;
  }
  std::string text;
  for (const auto& j : ordered) text += j.dump() + "\n";
  runtime::write_file_atomically(o.output, text);
  runtime::log::info("wrote " + std::to_string(rows) + " completions to " + o.output);
  return 0;
}

}  // namespace shardtrain::cli
