// What `shardtrain plan` says to arguments it refuses, for the plan tests.
#pragma once

#include <string>
#include <vector>

#include "shardtrain/cli/options.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::plan {

// `model` (Llama 3.1 8B unless named) planned with args: the UsageError's message, or "accepted".
inline std::string plan_refusal(std::vector<std::string> args,
                                const std::string& model = "llama3.1-8b") {
  args.insert(args.begin(), {"--model", model});
  try {
    cli::parse_plan(args, nullptr);
  } catch (const runtime::UsageError& e) {
    return e.what();
  }
  return "accepted";
}

}  // namespace shardtrain::plan
