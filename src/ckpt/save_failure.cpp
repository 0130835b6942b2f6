#include "shardtrain/ckpt/save_failure.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

namespace fs = std::filesystem;

namespace shardtrain::ckpt {
namespace {

std::string mib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

// MPI_Iallreduce(MAX) that a failed rank waits on for at most patience_s; false on timeout.
bool allreduce_max(MPI_Comm comm, int* value, bool impatient, double patience_s) {
  MPI_Request req;
  MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, value, 1, MPI_INT, MPI_MAX, comm, &req));
  if (!impatient) return MPI_Wait(&req, MPI_STATUS_IGNORE) == MPI_SUCCESS;
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(patience_s);
  for (int done = 0;;) {
    MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
    if (done) return true;
    if (std::chrono::steady_clock::now() > until)
      return false;  // the request leaks; the job is aborted next
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

std::string save_failure_message(const std::string& final_path, const std::string& first_error,
                                 int64_t free_bytes, int64_t need_bytes,
                                 const std::string& previous) {
  const std::string dir = fs::path(final_path).parent_path().string();
  const std::string kept = previous.empty()
                               ? "there is no earlier checkpoint"
                               : previous + " is intact and --resume auto will continue from it";
  if (free_bytes >= 0 && free_bytes < need_bytes)
    return "checkpoint " + final_path + ": the disk is full (" + mib(free_bytes) + " free in " +
           dir + ", the checkpoint needs " + mib(need_bytes) + "); " + kept +
           ". Free space there or pass another --checkpoint-dir";
  return "checkpoint " + final_path + " could not be written (" + first_error + "); " + kept +
         ". Check that --checkpoint-dir " + dir + " is writable";
}

void check_space(MPI_Comm comm, const std::string& final_path, int64_t need_bytes) {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  const auto dir = fs::path(final_path).parent_path();
  int64_t free_bytes = -1;
  std::error_code ec;
  if (rank == 0) {
    const auto space = fs::space(dir, ec);
    if (!ec) free_bytes = static_cast<int64_t>(space.available);
  }
  MPI_CHECK(MPI_Bcast(&free_bytes, 1, MPI_INT64_T, 0, comm));
  const int64_t with_margin =
      need_bytes + need_bytes / 16 + (1 << 20);  // HDF5's metadata and alignment
  if (free_bytes < 0 || free_bytes >= with_margin) return;
  std::string previous;
  std::ifstream(dir / "latest") >> previous;
  throw SaveFailed(save_failure_message(final_path, "", free_bytes, with_margin, previous));
}

void agree_on_save(MPI_Comm comm, const std::string& error, const std::string& tmp_path,
                   const std::string& final_path, int64_t need_bytes, double patience_s) {
  int rank = 0, size = 1;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  // The lowest failed rank + 1, or 0: one collective tells every rank whether and who.
  int first = error.empty() ? 0 : size - rank;
  if (!allreduce_max(comm, &first, !error.empty(), patience_s))
    throw runtime::Error("checkpoint " + final_path + " could not be written (" + error + ")");
  if (first == 0) return;
  const int root = size - first;
  std::vector<char> what(error.begin(), error.end());
  int len = static_cast<int>(what.size());
  MPI_CHECK(MPI_Bcast(&len, 1, MPI_INT, root, comm));
  what.resize(static_cast<size_t>(len));
  MPI_CHECK(MPI_Bcast(what.data(), len, MPI_CHAR, root, comm));
  std::error_code ec;
  if (rank == 0)
    fs::remove(tmp_path, ec);    // nothing partial stays behind, and its space is free again
  MPI_CHECK(MPI_Barrier(comm));  // measured after the removal, on every rank
  const auto dir = fs::path(final_path).parent_path();
  const auto space = fs::space(dir, ec);
  std::string previous;
  std::ifstream(dir / "latest") >> previous;
  throw SaveFailed(save_failure_message(final_path, std::string(what.begin(), what.end()),
                                        ec ? -1 : static_cast<int64_t>(space.available), need_bytes,
                                        previous));
}

}  // namespace shardtrain::ckpt
