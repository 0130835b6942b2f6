#include <iostream>

#include "shardtrain/cli/commands.h"
#include "shardtrain/cli/options.h"
#include "shardtrain/cli/run_checks.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::cli {

int cmd_prepare(const std::vector<std::string>& args, runtime::MpiEnv& env) {
  std::string help;
  PrepareCliOptions o = runtime::parse_on_every_rank([&] { return parse_prepare(args, &help); });
  if (o.common.wants_help()) return print_help(help, env);
  if (env.size() > 1)
    throw runtime::AgreedUsageError(
        "prepare is a single-process step; run it without mpirun/srun or with -np 1");
  // Checked before tokenizing, which can take long; run_prepare makes the missing directories.
  for (const auto& [opt, out] : {std::pair{"--output", o.prepare.output},
                                 {"--val-output", data::val_output_path(o.prepare)}}) {
    if (out.empty()) continue;
    if (const std::string why = runtime::probe_writable_file(out); !why.empty())
      throw runtime::UsageError(std::string(opt) + ": cannot write " + out + ": " + why);
  }
  const data::PrepareReport r = data::run_prepare(o.prepare);
  std::cout << data::format_report(o.prepare, r) << std::flush;
  return 0;
}

}  // namespace shardtrain::cli
