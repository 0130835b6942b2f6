#include "shardtrain/runtime/logging.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace shardtrain::runtime::log {
namespace {
int g_rank = 0;
std::mutex g_mu;

std::string stamp() {
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%H:%M:%S", &tm);
  return buf;
}

void emit(std::FILE* f, const char* level, const std::string& msg) {
  std::lock_guard<std::mutex> lock(g_mu);
  std::fprintf(f, "[%s %s r%d] %s\n", stamp().c_str(), level, g_rank, msg.c_str());
  std::fflush(f);
}
}  // namespace

void set_rank(int rank) { g_rank = rank; }
void info(const std::string& msg) {
  if (g_rank == 0) emit(stderr, "INFO", msg);
}
void info_all(const std::string& msg) { emit(stderr, "INFO", msg); }
void warn(const std::string& msg) { emit(stderr, "WARN", msg); }
void warn_once(const std::string& msg) {
  if (g_rank == 0) emit(stderr, "WARN", msg);
}
void error(const std::string& msg) { emit(stderr, "ERROR", msg); }
void error_line(const std::string& line) {
  const std::string s = line + "\n";
  std::lock_guard<std::mutex> lock(g_mu);
  for (size_t done = 0; done < s.size();) {
    const ssize_t n = ::write(2, s.data() + done, s.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
}

}  // namespace shardtrain::runtime::log
