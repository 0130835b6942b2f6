// The main of the engine's MPI test programs: MPI through MpiEnv, --ranks-per-node=K to simulate
// nodes of K ranks, one intra-op thread per rank (ranks share the cores), and an exit status that
// is the worst of every rank's, so a failure on any rank fails the ctest, and
// SHARDTRAIN_SKIP_STATUS when every rank skipped every case (gtest_skip.h).
#pragma once

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <cstring>

#include "gtest_skip.h"

#include "shardtrain/runtime/fast_exit.h"
#include "shardtrain/runtime/mpi_env.h"

inline int mpi_gtest_run(int argc, char** argv, shardtrain::runtime::MpiEnv*& global_env) {
  int ranks_per_node = 0;
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--ranks-per-node=", 17) == 0)
      ranks_per_node = std::atoi(argv[i] + 17);
  shardtrain::runtime::MpiEnv env(&argc, &argv);
  env.set_ranks_per_node(ranks_per_node);
  global_env = &env;
  at::set_num_threads(1);
  ::testing::InitGoogleTest(&argc, argv);
  if (env.rank() != 0) ::testing::GTEST_FLAG(print_time) = false;
  const int rc = RUN_ALL_TESTS();
  int worst = rc;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  const int skipped = skip_aware_status(worst) == SHARDTRAIN_SKIP_STATUS ? 1 : 0;
  int all_skipped = skipped;
  MPI_Allreduce(&skipped, &all_skipped, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  global_env = nullptr;
  return all_skipped ? SHARDTRAIN_SKIP_STATUS : worst;
}

// MPI is finalized when mpi_gtest_run returns; the static destructors are skipped (fast_exit.h).
[[noreturn]] inline void mpi_gtest_main(int argc, char** argv,
                                        shardtrain::runtime::MpiEnv*& global_env) {
  shardtrain::runtime::fast_exit(mpi_gtest_run(argc, argv, global_env));
}
