// Numbers and words as people type them.
#pragma once
#include <cstddef>
#include <string>

namespace shardtrain::runtime {

// The shortest text that reads back as exactly v: 1e-4, 0.1, 0.95, 1e-8, 32.
std::string round_trip(double v);
// Optimal string alignment distance: edits, with a swap of neighbours as one.
size_t edit_distance(const std::string& a, const std::string& b);

}  // namespace shardtrain::runtime
