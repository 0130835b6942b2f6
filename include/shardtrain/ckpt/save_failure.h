// A checkpoint save that fails on any rank fails on every rank alike: rank 0 prints one line
// that says what went wrong (a full disk is named as such), which checkpoint is still intact,
// and what to do; the unfinished file is removed so that it holds no space.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <string>

#include "shardtrain/runtime/error.h"

namespace shardtrain::ckpt {

// Thrown on every rank by agree_on_save: main prints rank 0's line once and exits 2, since a
// retry cannot succeed until someone frees space or fixes the directory.
class SaveFailed : public runtime::AgreedUsageError {
 public:
  using runtime::AgreedUsageError::AgreedUsageError;
};

// Pure: the line for a failed save of final_path. free_bytes < need_bytes reads as a full disk;
// previous: the newest complete checkpoint's file name ("" when there is none).
std::string save_failure_message(const std::string& final_path, const std::string& first_error,
                                 int64_t free_bytes, int64_t need_bytes,
                                 const std::string& previous);

// Collective over comm, before a save writes anything: throws SaveFailed on every rank when the
// file system of final_path has less than need_bytes plus a margin free (rank 0 looks). A full
// disk found here leaves nothing to clean up, and MPI-IO never meets it halfway through a write.
void check_space(MPI_Comm comm, const std::string& final_path, int64_t need_bytes);

// Collective over comm, after a save's writes: `error` is this rank's failure ("" when its part
// succeeded). Returns when every rank succeeded; otherwise rank 0 removes tmp_path and every rank
// throws SaveFailed. A failed rank whose peers never arrive (stuck in MPI-IO) gives up after
// `patience_s` and throws Error with its own message, which aborts the job.
void agree_on_save(MPI_Comm comm, const std::string& error, const std::string& tmp_path,
                   const std::string& final_path, int64_t need_bytes, double patience_s = 60);

}  // namespace shardtrain::ckpt
