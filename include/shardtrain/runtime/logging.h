// Rank-0 progress lines and all-rank warnings, timestamped.
#pragma once
#include <string>

namespace shardtrain::runtime::log {

void set_rank(int rank);
// Logs go to stderr, every level: stdout carries only a command's result (eval's JSON, generate's
// text, prepare's report), so `cmd 2>/dev/null` and pipes read just that.
void info(const std::string& msg);      // rank 0 only
void info_all(const std::string& msg);  // whichever rank calls it, as info (e.g. node-local rank 0)
void warn(const std::string& msg);      // every rank, stderr, prefixed with the rank
void warn_once(const std::string& msg);  // rank 0 only, stderr: what every rank would say alike
void error(const std::string& msg);      // every rank, stderr
// The job's one-line error on stderr, in one write: Open MPI's abort banner on the same stream
// cannot split it (std::cerr writes each << apart).
void error_line(const std::string& line);

}  // namespace shardtrain::runtime::log
