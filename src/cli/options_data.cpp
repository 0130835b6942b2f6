// Options of the data-side commands: prepare, tokenize, generate, convert and inspect.
#include <algorithm>
#include <filesystem>

#include "option_parts.h"
#include "shardtrain/ckpt/checkpoint_dir.h"
#include "shardtrain/runtime/error.h"

namespace fs = std::filesystem;

namespace shardtrain::cli {

using namespace parts;

PrepareCliOptions parse_prepare(const std::vector<std::string>& args, std::string* help_text) {
  PrepareCliOptions o;
  auto& p = o.prepare;
  std::string format = data::format_name(p.format),
              chat_template = data::chat_template_name(p.chat_template);
  std::string mode = p.packing ? "packing" : "padding",
              train_on = p.train_on_all ? "all" : "assistant";
  bool no_thinking = !p.enable_thinking;
  po::options_description d("Prepare");
  d.add_options()("tokenizer", po::value(&p.tokenizer), kTokenizerHelp)(
      "input", po::value(&p.input), "JSONL input: one JSON object per line")(
      "format", po::value(&format)->default_value(format),
      "alpaca (instruction/input/output), samsum (dialogue/summary), text, chat (messages or "
      "ShareGPT conversations), preference (prompt/chosen/rejected: DPO pairs), or auto")(
      "chat-template", po::value(&chat_template)->default_value(chat_template),
      "chat records: llama2, llama3, mistral, chatml, qwen3, gemma, gemma2, phi3, phi4, tulu, or "
      "auto "
      "(from the tokenizer's tokenizer_config.json chat_template)")(
      "train-on", po::value(&train_on)->default_value(train_on),
      "assistant (chat: the assistant turns; other formats: the answer) or all (every token in the "
      "loss)")("output", po::value(&p.output), "HDF5 token file to write (e.g. train.h5)")(
      "seq-len", po::value(&p.seq_len)->default_value(p.seq_len),
      "tokens per row; longer samples are truncated")(
      "mode", po::value(&mode)->default_value(mode),
      "packing (concatenate samples into full rows) or padding (one sample per row; preference "
      "pairs always)")("val-fraction", real(&p.val_fraction, p.val_fraction),
                       "hold out this share of the samples for validation")(
      "val-input", po::value(&p.val_input), "or: a second JSONL file for validation")(
      "val-output", po::value(&p.val_output), "validation token file (default: <output>.val.h5)")(
      "seed", po::value(&p.seed)->default_value(p.seed), "seed for the validation split")(
      "no-thinking", po::bool_switch(&no_thinking),
      "qwen3: preference prompts end with an empty <think> block, as its template renders "
      "enable_thinking=false")("strict", po::bool_switch(&p.strict),
                               "fail on the first bad line instead of skipping it")(
      "show-bad", po::value(&p.show_bad)->default_value(p.show_bad),
      "how many skipped lines to print");
  po::options_description all;
  all.add(common_desc(o.common)).add(d);
  parse_into(args, all);
  if (o.common.wants_help()) {
    if (help_text)
      *help_text = usage_text(
          o.common,
          "Usage: shardtrain prepare --tokenizer M --input F.jsonl --output F.h5 [options]", all);
    return o;
  }
  if (p.tokenizer.empty() || p.input.empty() || p.output.empty())
    throw runtime::UsageError("prepare needs --tokenizer, --input and --output");
  require_tokenizer(p.tokenizer);
  require_file("--input", p.input);
  require_file("--val-input", p.val_input);
  p.format = data::parse_format(format);
  p.chat_template = data::parse_chat_template(chat_template);
  if (train_on != "assistant" && train_on != "all")
    throw runtime::UsageError("--train-on must be assistant or all, got '" + train_on + "'");
  p.train_on_all = train_on == "all";
  p.enable_thinking = !no_thinking;
  if (mode != "packing" && mode != "padding")
    throw runtime::UsageError("--mode must be packing or padding, got '" + mode + "'");
  p.packing = mode == "packing";
  p.mode_given = std::any_of(args.begin(), args.end(), [](const std::string& a) {
    return a == "--mode" || a.rfind("--mode=", 0) == 0;
  });
  if (p.seq_len < 2)
    throw runtime::UsageError("--seq-len must be at least 2, got " + std::to_string(p.seq_len));
  if (p.val_fraction < 0 || p.val_fraction >= 1)
    throw runtime::UsageError("--val-fraction must be in [0, 1)");
  if (p.val_fraction > 0 && !p.val_input.empty())
    throw runtime::UsageError("use --val-fraction or --val-input, not both");
  if (p.show_bad < 0) throw runtime::UsageError("--show-bad must be >= 0");
  if (!p.val_output.empty() && p.val_output == p.output)
    throw runtime::UsageError("--val-output must differ from --output");
  return o;
}

GenerateOptions parse_generate(const std::vector<std::string>& args, std::string* help_text) {
  GenerateOptions o;
  ModelArgs m;
  FsdpArgs fa;
  po::options_description d("Generation");
  d.add_options()("tokenizer", po::value(&o.tokenizer), kTokenizerHelp)(
      "prompt", po::value(&o.prompts)->composing(), "prompt text (repeatable)")(
      "input", po::value(&o.input),
      "a JSONL file of prompts, one a line: {\"prompt\": text} or {\"messages\": [...]} ending "
      "with a user message (rendered by --chat-template with the generation prompt)")(
      "output", po::value(&o.output),
      "write the completions as JSONL (index, prompt_index, sample, completion, ids, stop; "
      "logprobs with --logprobs) instead of printing them")(
      "chat-template", po::value(&o.chat_template)->default_value(o.chat_template),
      "how --input's messages are rendered: auto (the tokenizer's own) or a name as prepare takes")(
      "template", po::value(&o.template_name)->default_value(o.template_name),
      "none (raw prompt) or alpaca (prompt is the instruction)")(
      "alpaca-input", po::value(&o.alpaca_input), "alpaca input field, with --template alpaca")(
      "max-new-tokens", po::value(&o.max_new_tokens)->default_value(o.max_new_tokens),
      "tokens to generate at most")("temperature", real(&o.temperature, o.temperature),
                                    "0: greedy; > 0: sample")(
      "top-k", po::value(&o.top_k)->default_value(o.top_k),
      "sample among the k most likely tokens, with --temperature > 0 (0: off)")(
      "top-p", real(&o.top_p, o.top_p), "nucleus sampling mass, with --temperature > 0")(
      "num-samples", po::value(&o.num_samples)->default_value(o.num_samples),
      "completions per prompt (each from its own seed)")(
      "stop", po::value(&o.stops)->composing(),
      "end a completion when it ends with this string's tokens, which are dropped (repeatable)")(
      "generate-batch", po::value(&o.generate_batch)->default_value(o.generate_batch),
      "rows decoded at once on each rank (the KV cache holds them all)")(
      "logprobs", po::bool_switch(&o.logprobs),
      "with --output: each sampled token's log-probability under the model")(
      "seed", po::value(&o.seed)->default_value(o.seed), "sampling seed");
  add_adapter_dir(d, o.adapter);
  po::options_description all;
  all.add(common_desc(o.common))
      .add(model_desc(m))
      .add(d)
      .add(fsdp_desc(o.fsdp, o.run, o.context_parallel, fa, false));
  parse_into(args, all);
  if (o.common.wants_help()) {
    if (help_text)
      *help_text = usage_text(o.common,
                              "Usage: [mpirun -np N] shardtrain generate --weights DIR --tokenizer "
                              "M --prompt TEXT [options]",
                              all);
    return o;
  }
  o.model = resolve(m);
  require_weights("generate", m);
  o.weights = m.weights;
  require_file("--weights", o.weights);
  if (o.tokenizer.empty())
    throw runtime::UsageError(
        "generate needs --tokenizer (the model's tokenizer.json or tokenizer.model, or its "
        "directory)");
  require_tokenizer(o.tokenizer);
  if (o.prompts.empty() && o.input.empty())
    throw runtime::UsageError("generate needs --prompt TEXT or --input prompts.jsonl");
  if (!o.input.empty()) require_file("--input", o.input);
  positive("--num-samples", static_cast<double>(o.num_samples), "use 1 or more");
  positive("--generate-batch", static_cast<double>(o.generate_batch), "use 1 or more");
  if (o.top_k < 0) throw runtime::UsageError("--top-k must be >= 0 (0: off)");
  if (o.logprobs && o.output.empty())
    throw runtime::UsageError("--logprobs goes into --output completions.jsonl; give --output");
  if (o.num_samples > 1 && o.temperature <= 0)
    throw runtime::UsageError(
        "--num-samples " + std::to_string(o.num_samples) +
        " with greedy decoding gives the same completion each time; set --temperature > 0");
  if (o.template_name != "none" && o.template_name != "alpaca")
    throw runtime::UsageError("--template must be none or alpaca, got '" + o.template_name + "'");
  positive("--max-new-tokens", static_cast<double>(o.max_new_tokens), "use 1 or more");
  if (o.temperature < 0) throw runtime::UsageError("--temperature must be >= 0 (0 is greedy)");
  if (!(o.top_p > 0 && o.top_p <= 1)) throw runtime::UsageError("--top-p must be in (0, 1]");
  check_threads(o.common);
  if (!o.adapter.empty()) o.run.adapters = read_adapter_config(o.adapter);
  check_fsdp(o.fsdp, o.run, fa, /*training=*/false);
  return o;
}

ConvertOptions parse_convert(const std::vector<std::string>& args, std::string* help_text) {
  ConvertOptions o;
  std::string dtype = dtype_name(o.dtype);
  po::options_description d("Convert");
  d.add_options()("input", po::value(&o.input),
                  "a checkpoint (step-N.h5, or a checkpoint directory: its latest), or a Hugging "
                  "Face model directory")("output", po::value(&o.output),
                                          "a Hugging Face model directory, or a checkpoint file")(
      "dtype", po::value(&dtype)->default_value(dtype),
      "dtype of exported safetensors: fp32 or bf16");
  add_convert_adapters(d, o.weights, o.merge_adapters);
  d.add_options()(
      "tokenizer", po::value(&o.tokenizer),
      "tokenizer the export carries: a SentencePiece .model, a tokenizer.json or a model directory "
      "(default: the tokenizer "
      "files of the --weights directory the checkpoint records, else the --tokenizer it records)");
  po::options_description all;
  all.add(common_desc(o.common)).add(d);
  parse_into(args, all);
  if (o.common.wants_help()) {
    if (help_text)
      *help_text = usage_text(o.common,
                              "Usage: [mpirun -np N] shardtrain convert --input A --output B", all);
    return o;
  }
  if (o.input.empty() || o.output.empty())
    throw runtime::UsageError("convert needs --input and --output");
  require_file("--input", o.input);
  o.from_checkpoint = ckpt::is_checkpoint_input(o.input);
  if (o.from_checkpoint) o.input = ckpt::resolve_checkpoint(o.input, "--input");
  require_file("--weights", o.weights);
  require_tokenizer(o.tokenizer);
  o.dtype = parse_dtype(dtype, "--dtype");
  check_threads(o.common);
  return o;
}

TokenizeOptions parse_tokenize(const std::vector<std::string>& args, std::string* help_text) {
  TokenizeOptions o;
  po::options_description d("Tokenize");
  d.add_options()("tokenizer", po::value(&o.tokenizer), kTokenizerHelp)(
      "input", po::value(&o.input),
      "JSONL of {\"text\": ...} lines (default: stdin); blank lines are skipped")(
      "add-special", po::bool_switch(&o.add_special),
      "add the special tokens the tokenizer adds itself (BOS for Llama-2 and Llama-3), as "
      "transformers' add_special_tokens=True");
  po::options_description all;
  all.add(common_desc(o.common)).add(d);
  parse_into(args, all);
  if (o.common.wants_help()) {
    if (help_text)
      *help_text = usage_text(
          o.common, "Usage: shardtrain tokenize --tokenizer T [--input F.jsonl] [--add-special]",
          all);
    return o;
  }
  if (o.tokenizer.empty())
    throw runtime::UsageError(
        "tokenize needs --tokenizer (a tokenizer.json, a SentencePiece .model, or a model "
        "directory)");
  require_tokenizer(o.tokenizer);
  require_file("--input", o.input);
  return o;
}

InspectOptions parse_inspect(const std::vector<std::string>& args, std::string* help_text) {
  InspectOptions o;
  po::options_description d("Inspect");
  d.add_options()("checkpoint", po::value(&o.checkpoint),
                  "checkpoint file (step-N.h5), or a checkpoint directory (its latest)");
  po::positional_options_description pos;
  pos.add("checkpoint", 1);
  po::options_description all;
  all.add(common_desc(o.common)).add(d);
  parse_into(args, all, &pos);
  if (o.common.wants_help()) {
    if (help_text)
      *help_text =
          usage_text(o.common, "Usage: shardtrain inspect CHECKPOINT_DIR | CHECKPOINT.h5", all);
    return o;
  }
  if (o.checkpoint.empty())
    throw runtime::UsageError(
        "inspect needs a checkpoint: shardtrain inspect DIR (its latest) or DIR/step-N.h5");
  o.checkpoint = ckpt::resolve_checkpoint(o.checkpoint, "inspect");
  return o;
}

}  // namespace shardtrain::cli
