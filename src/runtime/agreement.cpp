#include "shardtrain/runtime/agreement.h"

#include <mpi.h>

#include <climits>

namespace shardtrain::runtime {

std::string agreed_failure(const std::string& mine) {
  int rank = 0, first = INT_MAX;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  int candidate = mine.empty() ? INT_MAX : rank;
  MPI_CHECK(MPI_Allreduce(&candidate, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  if (first == INT_MAX) return "";
  int world = 1;
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
  std::string msg = rank != first ? "" : world > 1 ? mine + " (" + detail::identity() + ")" : mine;
  int len = static_cast<int>(msg.size());
  MPI_CHECK(MPI_Bcast(&len, 1, MPI_INT, first, MPI_COMM_WORLD));
  msg.resize(len);
  MPI_CHECK(MPI_Bcast(msg.data(), len, MPI_CHAR, first, MPI_COMM_WORLD));
  return msg;
}

}  // namespace shardtrain::runtime
