// shardtrain <command> [options]. Any failure on any rank prints one line and aborts the whole
// MPI job (exit 2 for a bad option or file, 1 otherwise), so no rank is left waiting.
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "shardtrain/cli/commands.h"
#include "shardtrain/cli/options.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/fast_exit.h"
#include "shardtrain/runtime/logging.h"
#include "shardtrain/runtime/mpi_env.h"
#include "shardtrain/runtime/version.h"

using namespace shardtrain;

namespace {

int run_command(int argc, char** argv) {
  std::unique_ptr<runtime::MpiEnv> env;
  try {
    const std::string cmd = argc > 1 ? argv[1] : "";
    std::vector<std::string> args(argv + std::min(argc, 2), argv + argc);
    if (cmd == "plan") return cli::cmd_plan(args);  // arithmetic on one process: no MPI start-up
    if (cmd == "tokenize")
      return cli::cmd_tokenize(args);  // a filter in a pipe: no MPI start-up either
    env = std::make_unique<runtime::MpiEnv>(&argc, &argv);
    args.assign(argv + std::min(argc, 2), argv + argc);
    if (cmd == "prepare") return cli::cmd_prepare(args, *env);
    if (cmd == "train") return cli::cmd_train(args, *env);
    if (cmd == "eval") return cli::cmd_eval(args, *env);
    if (cmd == "generate") return cli::cmd_generate(args, *env);
    if (cmd == "inspect") return cli::cmd_inspect(args, *env);
    if (cmd == "convert") return cli::cmd_convert(args, *env);
    if (cmd == "preflight") return cli::cmd_preflight(args, *env);
    if (cmd == "scaling") return cli::cmd_scaling(args, *env);
    if (cmd == "report") return cli::cmd_report(args, *env);
    if (cmd == "--version") {
      std::cout << "shardtrain " SHARDTRAIN_VERSION "\n";
      return 0;
    }
    if (cmd.empty() || cmd == "--help" || cmd == "-h" || cmd == "help") {
      if (!env || env->rank() == 0) std::cout << cli::top_level_help();
      return cmd.empty() ? 2 : 0;
    }
    throw runtime::UsageError("unknown command '" + cmd +
                              "'; run 'shardtrain --help' for the list");
  } catch (
      const runtime::AgreedUsageError& e) {  // thrown on every rank: one line, then exit 2 together
    if (!env || env->rank() == 0)
      runtime::log::error_line(std::string("shardtrain: error: ") + e.what());
    runtime::MpiEnv::exit_together(2);
  } catch (
      const runtime::UsageError& e) {  // this rank's alone: the others may wait in a collective
    const bool several = env && env->size() > 1;
    runtime::log::error_line(std::string("shardtrain: error: ") + e.what() +
                             (several ? " (" + runtime::detail::identity() + ")" : ""));
    runtime::MpiEnv::abort(2);
  } catch (const std::exception& e) {
    runtime::log::error_line(std::string("shardtrain: fatal: ") + e.what() + " (" +
                             shardtrain::runtime::detail::identity() + ")");
    runtime::MpiEnv::abort(1);
  }
}

}  // namespace

// MPI is finalized when run_command returns (its MpiEnv goes out of scope).
int main(int argc, char** argv) { runtime::fast_exit(run_command(argc, argv)); }
