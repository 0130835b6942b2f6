#include "shardtrain/runtime/writable.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace fs = std::filesystem;

namespace shardtrain::runtime {

namespace {

// dir, or its nearest existing ancestor: where create_directories would start.
fs::path existing_ancestor(const std::string& dir) {
  std::error_code ec;
  fs::path p = fs::absolute(dir, ec);
  while (!p.empty() && !fs::exists(p, ec) && p != p.parent_path()) p = p.parent_path();
  return p;
}

// Why no file can be created in the existing directory p (strerror), or "".
std::string cannot_create_in(const fs::path& p) {
  const fs::path probe = p / (".shardtrain-probe-" + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return std::strerror(errno);
  ::close(fd);
  ::unlink(probe.c_str());
  return "";
}

}  // namespace

std::string probe_writable_dir(const std::string& dir) {
  std::error_code ec;
  const fs::path p = existing_ancestor(dir);
  if (!fs::is_directory(p, ec)) return p.string() + " is not a directory";
  if (const std::string why = cannot_create_in(p); !why.empty())
    return "cannot create files in " + p.string() + ": " + why;
  return "";
}

std::string probe_writable_file(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return "it is a directory; name a file";
  const std::string dir = fs::path(path).parent_path().string();
  const fs::path p = existing_ancestor(dir.empty() ? "." : dir);
  if (!fs::is_directory(p, ec)) return p.string() + " is not a directory";
  const std::string why = cannot_create_in(p);
  if (why.empty() || fs::equivalent(p, dir.empty() ? "." : dir, ec)) return why;
  return why + " (in " + p.string() + ", where its missing directories would be made)";
}

}  // namespace shardtrain::runtime
