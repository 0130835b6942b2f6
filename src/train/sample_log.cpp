#include "shardtrain/train/sample_log.h"

#include <nlohmann/json.hpp>

#include "shardtrain/runtime/error.h"

namespace shardtrain::train {

SampleLog::SampleLog(const std::string& path, int rank) {
  if (path.empty() || rank != 0) return;
  out_.open(path, std::ios::app);
  if (!out_)
    throw runtime::UsageError("--log-sample-ids " + path +
                              " cannot be opened for writing; pass a writable path");
}

void SampleLog::write(int64_t step, int64_t epoch, const std::vector<int64_t>& rows) {
  if (!out_.is_open()) return;
  out_ << nlohmann::json{{"step", step}, {"epoch", epoch}, {"rows", rows}}.dump() << '\n';
  out_.flush();  // a killed run's lines up to its last step stay
}

}  // namespace shardtrain::train
