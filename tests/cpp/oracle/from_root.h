// The single-rank trainer's answers, computed on rank 0 alone and sent to every rank. Run on
// every rank, it was most of an MPI test's work: at 4 ranks, 4 whole batches beside one.
#pragma once
#include <mpi.h>

#include <cstdint>

#include "oracle/trainer.h"

namespace shardtrain::oracle {

// Rank 0's `r` on every rank (the others pass a default StepResult).
inline StepResult from_root(const StepResult& r, MPI_Comm comm = MPI_COMM_WORLD) {
  double v[3] = {r.loss, r.grad_norm, static_cast<double>(r.tokens)};  // tokens: exact below 2^53
  MPI_Bcast(v, 3, MPI_DOUBLE, 0, comm);
  return {v[0], v[1], static_cast<int64_t>(v[2])};
}

inline double from_root(double x, MPI_Comm comm = MPI_COMM_WORLD) {
  MPI_Bcast(&x, 1, MPI_DOUBLE, 0, comm);
  return x;
}

}  // namespace shardtrain::oracle
