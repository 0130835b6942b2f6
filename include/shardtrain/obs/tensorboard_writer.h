// TensorBoard's records of one process's share of a run: scalars, text (the text plugin) and
// hyper-parameters (the HParams plugin), in a new event file of the run's directory.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "shardtrain/obs/event_file.h"

namespace shardtrain::obs {

class TensorBoardWriter {
 public:
  // Its first records: the file version, then a session start at first_step, from which step on
  // TensorBoard's reader drops what earlier files of the run directory logged (the steps a resumed
  // run redoes). Throws UsageError naming --tensorboard when the file cannot be made.
  TensorBoardWriter(const std::string& run_dir, const std::string& host, int64_t first_step);
  // Each returns false when the write failed (errno says why).
  bool scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values);
  bool text(int64_t step, const std::string& tag, const std::string& markdown);
  // hparams: flat, name -> number, string or bool (others are left out); metrics: the scalar tags
  // the HParams dashboard compares runs by; group: the session group, the run's name.
  bool hparams(int64_t step, const nlohmann::json& hparams, const std::vector<std::string>& metrics,
               const std::string& group);
  bool session_end(int64_t step, bool success);
  bool flush() { return file_.flush(); }
  const std::string& path() const { return file_.path(); }

 private:
  EventFile file_;
  double start_time_;
};

}  // namespace shardtrain::obs
