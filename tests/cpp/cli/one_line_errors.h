// What a refused run must look like to a user, for the CLI tests: exit 2, one
// "shardtrain: error:" line naming the problem, no library stack.
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "run_binary.h"

namespace testing_support {

inline size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

// before_step1: the run must have stopped before training (false for a failure at the end, e.g. an
// export).
inline void expect_one_line_exit2(const Result& r, const std::string& needle,
                                  bool before_step1 = true) {
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(count(r.out, "shardtrain: error: "), 1u) << r.out;
  EXPECT_NE(r.out.find(needle), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("HDF5-DIAG"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("fatal"), std::string::npos) << r.out;
  if (before_step1) {
    EXPECT_EQ(r.out.find("step 1/"), std::string::npos) << "failed before step 1\n" << r.out;
  }
}

}  // namespace testing_support
