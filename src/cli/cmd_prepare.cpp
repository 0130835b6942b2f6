#include <iostream>

#include "shardtrain/cli/commands.h"
#include "shardtrain/cli/options.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::cli {

int cmd_prepare(const std::vector<std::string>& args, MpiEnv& env) {
  std::string help;
  PrepareCliOptions o = parse_prepare(args, &help);
  if (o.common.wants_help()) return print_help(help, env);
  if (env.size() > 1) throw UsageError("prepare is a single-process step; run it without mpirun/srun or with -np 1");
  const PrepareReport r = run_prepare(o.prepare);
  std::cout << format_report(o.prepare, r) << std::flush;
  return 0;
}

}  // namespace shardtrain::cli
