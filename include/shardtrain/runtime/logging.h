// Rank-0 progress lines and all-rank warnings, timestamped.
#pragma once
#include <string>

namespace shardtrain::log {

void set_rank(int rank);
void info(const std::string& msg);   // rank 0 only, stdout
void info_all(const std::string& msg);  // whichever rank calls it, stdout (e.g. node-local rank 0)
void warn(const std::string& msg);   // every rank, stderr, prefixed with the rank
void error(const std::string& msg);  // every rank, stderr

}  // namespace shardtrain::log
