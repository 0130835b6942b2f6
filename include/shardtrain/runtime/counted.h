// "1 rank", "2 ranks": a count with its noun in the number the count takes, for the lines users
// read ("1 ranks on 1 nodes" read as a bug).
#pragma once
#include <string>

namespace shardtrain::runtime {

inline std::string counted(long long n, const std::string& noun, const std::string& plural = "") {
  return std::to_string(n) + " " + (n == 1 ? noun : plural.empty() ? noun + "s" : plural);
}

}  // namespace shardtrain::runtime
