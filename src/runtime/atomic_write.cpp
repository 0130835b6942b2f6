#include "shardtrain/runtime/atomic_write.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "shardtrain/runtime/file_sync.h"

namespace fs = std::filesystem;

namespace shardtrain::runtime {
namespace {

constexpr int64_t kAlmostFull = 64 << 10;  // a failed write with less free than this is a full disk

std::string dir_of(const std::string& path) {
  const std::string d = fs::path(path).parent_path().string();
  return d.empty() ? "." : d;
}

std::string human(int64_t bytes) {
  char buf[32];
  if (bytes < (1 << 20))
    std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(bytes) / 1024);
  else
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

// errno as one of the four storage failures, or 0.
int storage_kind(int e) {
  if (e == EPERM) return EACCES;
  return e == ENOSPC || e == EDQUOT || e == EROFS || e == EACCES ? e : 0;
}

[[noreturn]] void throw_storage(const std::string& target, int err, int64_t free) {
  throw StorageError(storage_failure_line(target, err, free), err, free);
}

// The failure being handled, classified: a StorageError naming target, or rethrown as it was.
[[noreturn]] void rethrow_classified(const std::string& target, const std::string& dir) {
  try {
    throw;
  } catch (const StorageError& e) {  // a file inside a directory output: name the output
    throw_storage(target, e.err(), e.free_bytes());
  } catch (const UsageError&) {
    throw;  // already one line that says what to do
  } catch (const std::exception& e) {
    const int64_t free = free_bytes(dir);
    if (const int err = storage_errno(e.what(), free)) throw_storage(target, err, free);
    throw;
  }
}

// Creates dir and its parents; a storage failure there is one line naming target.
void make_dirs(const std::string& target, const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!ec) return;
  if (const int err = storage_kind(ec.value())) throw_storage(target, err, free_bytes(dir));
  throw UsageError("cannot write " + target + ": cannot create " + dir + " (" + ec.message() + ")");
}

}  // namespace

std::string tmp_path(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();  // a directory given as DIR/
  return p + ".tmp";
}

int64_t free_bytes(const std::string& dir) {
  struct statvfs s {};
  if (::statvfs(dir.c_str(), &s) != 0) return -1;
  return static_cast<int64_t>(s.f_bavail) * static_cast<int64_t>(s.f_frsize);
}

int storage_errno(const std::string& message, int64_t free) {
  for (int e : {ENOSPC, EDQUOT, EROFS, EACCES, EPERM}) {
    // strerror's text (std::ofstream, std::filesystem) or HDF5's "errno = 28, error message = ..."
    if (message.find(std::strerror(e)) != std::string::npos ||
        message.find("errno = " + std::to_string(e) + ",") != std::string::npos)
      return storage_kind(e);
  }
  return free >= 0 && free < kAlmostFull ? ENOSPC : 0;
}

std::string storage_failure_line(const std::string& path, int err, int64_t free) {
  const std::string dir = dir_of(path);
  std::string what, advice;
  switch (err) {
    case ENOSPC:
      what = "no space left on device" +
             (free >= 0 ? " (it needs more than the " + human(free) + " free in " + dir + ")" : "");
      advice = "free space there or write elsewhere";
      break;
    case EDQUOT:
      what = "disk quota exceeded";
      advice = "free space within your quota (quota -s; lfs quota on Lustre) or write elsewhere";
      break;
    case EROFS:
      what = "read-only file system";
      advice = "write to a writable file system, or remount " + dir + " read-write";
      break;
    default:
      what = "permission denied";
      advice = "write to a directory this user can write, or fix the permissions of " + dir;
  }
  return "cannot write " + path + ": " + what + ", and no partial output was left; " + advice;
}

void write_atomically(const std::string& path,
                      const std::function<void(const std::string& tmp)>& write) {
  const std::string dir = dir_of(path);  // made by the caller, which knows the option to name
  const std::string tmp = tmp_path(path);
  // Created here first: a read-only or forbidden directory is told by open's own errno.
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int e = errno;
    if (const int err = storage_kind(e)) throw_storage(path, err, free_bytes(dir));
    throw Error("cannot write " + path + ": cannot create " + tmp + " (" + std::strerror(e) + ")");
  }
  ::close(fd);
  try {
    write(tmp);
    sync_file(tmp);  // a network file system may report a full disk or quota only here
    fs::rename(tmp, path);
  } catch (...) {
    const int64_t full = free_bytes(dir);  // judged before the removal frees the temporary's space
    std::error_code ec;
    fs::remove(tmp, ec);
    try {
      throw;
    } catch (const std::exception& e) {
      if (dynamic_cast<const UsageError*>(&e) == nullptr)
        if (const int err = storage_errno(e.what(), full))
          throw_storage(path, err, free_bytes(dir));
      throw;
    }
  }
}

void write_file_atomically(const std::string& path, const std::string& bytes) {
  write_atomically(path, [&](const std::string& tmp) {
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
    if (fd < 0) throw Error("cannot open " + tmp + ": " + std::strerror(errno));
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const int e = errno;
        ::close(fd);
        throw Error("cannot write " + tmp + ": " + std::strerror(e));
      }
      done += static_cast<size_t>(n);
    }
    if (::close(fd) != 0) throw Error("cannot write " + tmp + ": " + std::strerror(errno));
  });
}

void write_dir_atomically(const std::string& dir,
                          const std::function<void(const std::string& into)>& write) {
  std::error_code ec;
  const bool fresh = !fs::exists(dir, ec) || (fs::is_directory(dir, ec) && fs::is_empty(dir, ec));
  const std::string parent = dir_of(tmp_path(dir));
  if (!fresh) {  // files of its own, or another export's: replaced one by one, each atomically
    try {
      write(dir);
    } catch (...) {
      rethrow_classified(dir, dir);
    }
    return;
  }
  const std::string tmp = tmp_path(dir);
  fs::remove_all(tmp, ec);  // an earlier run's unfinished export
  make_dirs(dir, tmp);
  try {
    write(tmp);
    sync_best_effort(tmp);
    if (::rename(tmp.c_str(), dir.c_str()) != 0)  // replaces an empty dir
      throw fs::filesystem_error("cannot rename " + tmp + " to " + dir,
                                 std::error_code(errno, std::generic_category()));
    sync_best_effort(parent);
  } catch (...) {
    try {
      rethrow_classified(dir, parent);  // judged before the removal frees the space
    } catch (const StorageError& e) {
      fs::remove_all(tmp, ec);
      throw_storage(dir, e.err(), free_bytes(parent));  // what the whole output had, once removed
    } catch (...) {
      fs::remove_all(tmp, ec);
      throw;
    }
  }
}

}  // namespace shardtrain::runtime
