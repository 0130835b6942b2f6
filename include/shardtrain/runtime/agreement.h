// Errors every rank reports alike: the lowest failing rank's message, shared over the world, so
// that a job ends with one line (exit 2) and no rank is left waiting in a collective.
#pragma once
#include <string>

#include "shardtrain/runtime/error.h"

namespace shardtrain::runtime {

// Collective: the lowest failing rank's message, or "" when no rank failed. With more than one
// rank the message names the rank and host that saw it.
std::string agreed_failure(const std::string& mine);

// Collective: parse() on every rank; a UsageError on any (a bad option or a missing file, the same
// on every rank that shares the file system, or on some) is the lowest such rank's, thrown on all
// alike as an AgreedUsageError, so that the job ends with one line.
template <class Parse>
auto parse_on_every_rank(Parse parse) -> decltype(parse()) {
  decltype(parse()) parsed;
  std::string failure;
  try {
    parsed = parse();
  } catch (const AgreedUsageError&) {
    throw;
  } catch (const UsageError& e) {
    failure = e.what();
  }
  if (const std::string agreed = agreed_failure(failure); !agreed.empty())
    throw AgreedUsageError(agreed);
  return parsed;
}

}  // namespace shardtrain::runtime
