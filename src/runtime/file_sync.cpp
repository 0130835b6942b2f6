#include "shardtrain/runtime/file_sync.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "shardtrain/runtime/error.h"

namespace shardtrain::runtime {

namespace {
int sync_path(const std::string& path) {  // 0, or the errno of the open or the fsync
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return errno;
  const int rc = ::fsync(fd) == 0 ? 0 : errno;
  ::close(fd);
  return rc;
}
}  // namespace

void sync_file(const std::string& path) {
  if (const int e = sync_path(path)) throw Error("cannot fsync " + path + ": " + std::strerror(e));
}

bool sync_best_effort(const std::string& path) { return sync_path(path) == 0; }

}  // namespace shardtrain::runtime
