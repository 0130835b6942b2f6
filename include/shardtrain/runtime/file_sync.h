// fsync for checkpoints: a file whose data must be on disk before it is published, and the
// directory entries of a rename (best effort: some file systems cannot sync a directory).
#pragma once

#include <string>

namespace shardtrain::runtime {

void sync_file(const std::string& path);  // throws Error: unsynced data is not known to be on disk
bool sync_best_effort(const std::string& path);  // false when it could not be opened or synced

}  // namespace shardtrain::runtime
