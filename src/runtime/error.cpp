#include "shardtrain/runtime/error.h"

#include <mpi.h>
#include <unistd.h>

#include <mutex>
#include <sstream>

namespace shardtrain::runtime::detail {
namespace {
std::mutex g_mu;
int g_rank = -1;
std::string g_host;

std::string local_host() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}
}  // namespace

void set_identity(int rank, const std::string& host) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_rank = rank;
  g_host = host;
}

std::string identity() {
  std::lock_guard<std::mutex> lock(g_mu);
  std::string host = g_host.empty() ? local_host() : g_host;
  if (g_rank < 0) return "host " + host;
  return "rank " + std::to_string(g_rank) + " on host " + host;
}

void fail(const char* lib, const std::string& message, const char* expr, const char* file,
          int line) {
  std::ostringstream os;
  os << lib << " error: " << message;
  if (expr && *expr) os << " [" << expr << "]";
  os << " at " << file << ":" << line << " (" << identity() << ")";
  throw Error(os.str());
}

std::string mpi_error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS)
    return "MPI error code " + std::to_string(code);
  return std::string(buf, static_cast<size_t>(len));
}

}  // namespace shardtrain::runtime::detail
