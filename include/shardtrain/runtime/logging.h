// Rank-0 progress lines and all-rank warnings, timestamped.
#pragma once
#include <string>

namespace shardtrain::runtime::log {

void set_rank(int rank);
// From now on info lines go to stderr: for commands whose stdout is their answer (generate).
void info_to_stderr();
void info(const std::string& msg);      // rank 0 only, stdout (stderr after info_to_stderr)
void info_all(const std::string& msg);  // whichever rank calls it, as info (e.g. node-local rank 0)
void warn(const std::string& msg);      // every rank, stderr, prefixed with the rank
void warn_once(const std::string& msg);  // rank 0 only, stderr: what every rank would say alike
void error(const std::string& msg);      // every rank, stderr
// The job's one-line error on stderr, in one write: Open MPI's abort banner on the same stream
// cannot split it (std::cerr writes each << apart).
void error_line(const std::string& line);

}  // namespace shardtrain::runtime::log
