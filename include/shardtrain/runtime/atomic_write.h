// Outputs that appear whole or not at all: a writer fills PATH.tmp beside PATH, which is renamed
// to PATH on success and removed on failure, so a later run never takes a partial file. A failure
// of the storage itself (full, over quota, read-only, no permission) becomes one line naming the
// path and what to do (exit 2), instead of a library's error stack.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "shardtrain/runtime/error.h"

namespace shardtrain::runtime {

// A storage failure, as one line; err is ENOSPC, EDQUOT, EROFS or EACCES.
class StorageError : public UsageError {
 public:
  StorageError(const std::string& line, int err, int64_t free_bytes)
      : UsageError(line), err_(err), free_(free_bytes) {}
  int err() const { return err_; }
  int64_t free_bytes() const {
    return free_;
  }  // in the directory once the partial output was removed; -1: unknown

 private:
  int err_;
  int64_t free_;
};

// PATH.tmp: the one name an unfinished output has (crash benches watch for it).
std::string tmp_path(const std::string& path);

// Bytes free to this user in dir's file system; -1 when it cannot be told.
int64_t free_bytes(const std::string& dir);

// Which storage failure an error shows: ENOSPC, EDQUOT, EROFS, EACCES (EPERM counts as EACCES),
// or 0. `message` is the error's text: libraries such as HDF5 report errno only there. A write
// that failed where under 64 KiB was free is ENOSPC whatever the text says.
int storage_errno(const std::string& message, int64_t free_bytes);

// "cannot write PATH: no space left on device (it needs more than the 12.0 KiB free in DIR), and
// ..."
std::string storage_failure_line(const std::string& path, int err, int64_t free_bytes);

// write(tmp) fills tmp_path(path), which is fsynced and renamed to path; path's directory must
// exist (runtime::Error naming path otherwise). On any failure the
// temporary is removed; a storage failure is rethrown as StorageError naming path, any other
// error as it was. An existing file at path stays as it was until the rename.
void write_atomically(const std::string& path,
                      const std::function<void(const std::string& tmp)>& write);

// bytes to path through write_atomically, with errno in any error.
void write_file_atomically(const std::string& path, const std::string& bytes);

// A directory output (an HF export). When dir is absent or empty, write(DIR.tmp) fills a fresh
// directory that is renamed to dir, and removed whole on failure. When dir already holds files,
// write(dir) writes into it, each file through write_atomically. A storage failure names dir.
void write_dir_atomically(const std::string& dir,
                          const std::function<void(const std::string& into)>& write);

}  // namespace shardtrain::runtime
