// shardtrain plan: memory per rank and step time for every node count and strategy asked for.
// Pure arithmetic on one rank; no device and no communicator.
#include <cmath>
#include <iostream>

#include "shardtrain/cli/commands.h"
#include "shardtrain/cli/options.h"
#include "shardtrain/plan/plan_output.h"
#include "shardtrain/report/files.h"
#include "shardtrain/runtime/clock.h"
#include "shardtrain/runtime/logging.h"

namespace shardtrain::cli {

int cmd_plan(const std::vector<std::string>& args) {
  std::string help;
  PlanOptions o = parse_plan(args, &help);
  if (o.common.wants_help()) {
    std::cout << help;
    return 0;
  }
  // A fabric from other instances than the GPU's is allowed (a what-if), but never silently.
  const std::string mismatch = plan::fabric_gpu_mismatch(o.input.fabric, o.input.gpu);
  if (!mismatch.empty()) runtime::log::warn_once(mismatch);
  const runtime::Stopwatch clock;
  const auto rows = plan::plan_rows(o.input);
  if (!o.csv.empty()) report::write_text(o.csv, plan::plan_csv(rows));
  if (!o.png.empty()) plan::plan_png(o.png, o.input, rows);
  const auto j = plan::plan_json(o.input, rows);
  if (!o.json_file.empty()) report::write_text(o.json_file, j.dump(2) + "\n");
  std::string text = o.json ? j.dump(2) + "\n" : plan::plan_table(o.input, rows);
  if (!o.json)  // the arithmetic and the files, not the process start (loading LibTorch)
    text += "planned " + std::to_string(rows.size()) + " rows in " +
            std::to_string(std::lround(clock.seconds() * 1000)) + " ms\n";
  std::cout << text << std::flush;
  return 0;
}

}  // namespace shardtrain::cli
