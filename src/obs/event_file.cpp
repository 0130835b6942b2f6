#include "shardtrain/obs/event_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "shardtrain/runtime/crc32c.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::obs {
namespace {

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

[[noreturn]] void fail(const std::string& what, const std::string& path) {
  throw runtime::UsageError("--tensorboard: cannot " + what + " " + path + " (" +
                            std::strerror(errno) + "); choose a directory this job can write");
}

}  // namespace

std::string frame_record(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  put_le(out, data.size(), 8);
  put_le(out, runtime::mask_crc32c(runtime::crc32c(out.data(), 8)), 4);
  out.append(data);
  put_le(out, runtime::mask_crc32c(runtime::crc32c(data.data(), data.size())), 4);
  return out;
}

EventFile::EventFile(const std::string& dir, const std::string& host, long long unix_time) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    errno = ec.value();
    fail("make the directory", dir);
  }
  const std::string base = (std::filesystem::path(dir) /
                            ("events.out.tfevents." + std::to_string(unix_time) + "." + host))
                               .string();
  for (int n = 0; !f_; ++n) {
    path_ = n == 0 ? base : base + "." + std::to_string(n);
    // O_EXCL: a new file, never another writer's (a resumed run appends a file of its own)
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EEXIST && n < 1000) continue;
    if (fd < 0) fail("create", path_);
    f_ = ::fdopen(fd, "wb");
    if (!f_) {
      ::close(fd);
      fail("open", path_);
    }
  }
}

EventFile::~EventFile() {
  if (f_) std::fclose(f_);  // flushes what is buffered: the run's end, an exception's unwinding
}

bool EventFile::append(std::string_view data) {
  const std::string rec = frame_record(data);
  return std::fwrite(rec.data(), 1, rec.size(), f_) == rec.size();
}

bool EventFile::flush() { return std::fflush(f_) == 0; }

}  // namespace shardtrain::obs
