// A checkpoint directory: DIR/step-00000010.h5 files and DIR/latest, which names the newest
// complete one. Which checkpoint a user's path means, and which one --resume auto takes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace shardtrain::ckpt {

std::string step_path(const std::string& dir, int64_t step);
// Rank 0 only: fsync + rename tmp -> final, then point `latest` at it (atomically), then keep
// only the newest `keep` checkpoints (keep <= 0: all).
void publish(const std::string& tmp, const std::string& final_path, int keep);
// step-*.h5 in dir, oldest first; unfinished saves (*.h5.tmp) never match.
std::vector<std::string> list_checkpoints(const std::string& dir);
// The path of the checkpoint dir/latest names; "" when dir has no `latest`.
std::string latest_checkpoint(const std::string& dir);
// The checkpoints to try for --resume: "auto" gives the one `latest` names, then the older ones,
// newest first (the caller falls back to those only when it fails to load); without `latest`,
// every step-*.h5, newest first. A path gives itself.
std::vector<std::string> resume_candidates(const std::string& spec, const std::string& dir);
// A checkpoint as users type it: a step-N.h5 file, or a checkpoint directory or its `latest`
// file, both meaning the checkpoint `latest` names. Throws UsageError naming `opt`.
std::string resolve_checkpoint(const std::string& spec, const std::string& opt);
// Whether dir holds checkpoints or a `latest`.
bool holds_checkpoints(const std::string& dir);
// convert --input: a checkpoint (a .h5 file, `latest`, or a directory of checkpoints) rather than
// a Hugging Face model directory; throws UsageError for a directory that is neither.
bool is_checkpoint_input(const std::string& path);
// Rank 0: removes every checkpoint and `latest` in dir (--overwrite-checkpoints); returns how many
// files.
int remove_checkpoints(const std::string& dir);

}  // namespace shardtrain::ckpt
