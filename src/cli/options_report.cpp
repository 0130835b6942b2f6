// Options of `shardtrain report` (the description lives with the other commands' in this module).
#include <filesystem>

#include "option_parts.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::cli {
using namespace parts;

ReportOptions parse_report(const std::vector<std::string>& args, std::string* help_text) {
  ReportOptions o;
  po::options_description d("Training report");
  d.add_options()("metrics", po::value(&o.metrics)->composing(),
                  "METRICS.jsonl written by train --metrics-file (also positional; one or more, "
                  "each drawn as one run)")(
      "out-dir", po::value(&o.out_dir),
      "write loss.png, throughput.png, breakdown.png and summary.md here (created if missing)")(
      "title", po::value(&o.title),
      "heading of the summary and prefix of the chart titles (e.g. the model and cluster)")(
      "smooth", po::value(&o.smooth)->default_value(o.smooth),
      "also draw the loss as a trailing mean over K steps (0 or 1: per-step loss only)");
  po::positional_options_description pos;
  pos.add("metrics", -1);
  po::options_description all;
  all.add(common_desc(o.common)).add(d);
  parse_into(args, all, &pos);
  if (o.common.wants_help()) {
    if (help_text)
      *help_text = usage_text(o.common,
                              "Usage: shardtrain report METRICS.jsonl [METRICS.jsonl ...] "
                              "--out-dir DIR [--title T] [--smooth K]\n"
                              "Charts of loss, throughput/MFU and the step-time breakdown (with "
                              "stragglers across ranks), and a\n"
                              "summary table; each run is named after its file's directory.",
                              all);
    return o;
  }
  if (o.metrics.empty())
    throw runtime::UsageError(
        "no metrics file given: pass one or more METRICS.jsonl (written by train --metrics-file)");
  if (o.out_dir.empty())
    throw runtime::UsageError("--out-dir is required: the directory for the charts and summary.md");
  if (o.smooth < 0)
    throw runtime::UsageError("--smooth must be >= 0 steps (0: no moving average), got " +
                              std::to_string(o.smooth));
  for (const auto& m : o.metrics)
    if (!std::filesystem::is_regular_file(m))
      throw runtime::UsageError(m +
                                " is not a file; pass the JSONL that train --metrics-file wrote");
  check_threads(o.common);
  return o;
}

}  // namespace shardtrain::cli
