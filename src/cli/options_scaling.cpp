// Options of `shardtrain scaling` (the description lives with the other commands' in this module).
#include <algorithm>
#include <cctype>
#include <filesystem>

#include "option_parts.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::cli {
using namespace parts;

namespace {

// NODES:PATH, split at the first colon so that PATH may hold colons of its own.
ScalingRun parse_run(const std::string& spec) {
  const size_t colon = spec.find(':');
  const std::string nodes = colon == std::string::npos ? "" : spec.substr(0, colon);
  const bool digits =
      !nodes.empty() && nodes.size() <= 6 &&
      std::all_of(nodes.begin(), nodes.end(), [](unsigned char c) { return std::isdigit(c); });
  if (!digits || std::stoi(nodes) < 1 || colon + 1 >= spec.size())
    throw runtime::UsageError("--run '" + spec +
                              "' must be NODES:METRICS.jsonl with NODES a whole number >= 1, e.g. "
                              "--run 4:metrics-4n.jsonl");
  ScalingRun r{std::stoi(nodes), spec.substr(colon + 1)};
  if (!std::filesystem::is_regular_file(r.metrics))
    throw runtime::UsageError("--run " + spec + ": " + r.metrics +
                              " is not a file; pass the JSONL that train --metrics-file wrote");
  return r;
}

}  // namespace

ScalingOptions parse_scaling(const std::vector<std::string>& args, std::string* help_text) {
  ScalingOptions o;
  std::vector<std::string> runs;
  po::options_description d("Scaling report");
  d.add_options()("run", po::value(&runs)->composing(),
                  "NODES:METRICS.jsonl, a train --metrics-file from a run on NODES nodes; repeat "
                  "once per node count")(
      "out-dir", po::value(&o.out_dir),
      "write scaling.md, scaling.csv and scaling.png here (created if missing)")(
      "skip-steps", po::value(&o.skip_steps)->default_value(o.skip_steps),
      "leave each run's first K measured steps (warmup) out of the medians")(
      "title", po::value(&o.title),
      "heading of the table and chart titles (e.g. the model and cluster)");
  po::options_description all;
  all.add(common_desc(o.common)).add(d);
  parse_into(args, all);
  if (o.common.wants_help()) {
    if (help_text)
      *help_text = usage_text(o.common,
                              "Usage: shardtrain scaling --run NODES:METRICS.jsonl [--run ...] "
                              "--out-dir DIR [--skip-steps K] [--title T]\n"
                              "Medians of tokens_per_s and mfu per run; speedup and scaling "
                              "efficiency against the fewest nodes.",
                              all);
    return o;
  }
  if (runs.empty())
    throw runtime::UsageError(
        "--run is required: pass --run NODES:METRICS.jsonl once per node count");
  if (o.out_dir.empty())
    throw runtime::UsageError("--out-dir is required: the directory for scaling.md, .csv and .png");
  if (o.skip_steps < 0) throw runtime::UsageError("--skip-steps must be >= 0 (0: use every step)");
  for (const auto& r : runs) o.runs.push_back(parse_run(r));
  check_threads(o.common);
  return o;
}

}  // namespace shardtrain::cli
