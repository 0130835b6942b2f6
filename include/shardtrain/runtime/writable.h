// Whether a run's outputs can be written, asked before the run spends anything on them.
#pragma once
#include <string>

namespace shardtrain::runtime {

// Why a file could not be created in dir (or in its nearest existing ancestor, as
// create_directories would), or "" when it can. Creates nothing that outlives the call.
std::string probe_writable_dir(const std::string& dir);
// Why the file at path could not be written (its missing directories made first), as a reason
// to follow "cannot write PATH: " ("Permission denied", "it is a directory; name a file"), or "".
std::string probe_writable_file(const std::string& path);

}  // namespace shardtrain::runtime
