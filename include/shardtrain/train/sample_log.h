// --log-sample-ids: each step's global batch as one JSONL line, {"step", "epoch", "rows"}, the
// token-file rows in the order the ranks split them; a resumed run appends, so the lines of an
// interrupted and resumed run can be compared with an uninterrupted run's. Rank 0 only.
#pragma once
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace shardtrain::train {

class SampleLog {
 public:
  SampleLog(const std::string& path,
            int rank);  // "" or rank != 0: logs nothing; throws UsageError when unwritable
  void write(int64_t step, int64_t epoch, const std::vector<int64_t>& rows);

 private:
  std::ofstream out_;
};

}  // namespace shardtrain::train
