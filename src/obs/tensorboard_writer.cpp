#include "shardtrain/obs/tensorboard_writer.h"

#include <chrono>

#include "shardtrain/obs/tensorboard_events.h"

namespace shardtrain::obs {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

TensorBoardWriter::TensorBoardWriter(const std::string& run_dir, const std::string& host,
                                     int64_t first_step)
    : file_(run_dir, host, static_cast<long long>(now_s())), start_time_(now_s()) {
  if (file_.append(tb_events::file_version(now_s())) &&
      file_.append(tb_events::session_start(now_s(), first_step)))
    file_.flush();  // a reader finds a valid file at once
}

bool TensorBoardWriter::scalars(int64_t step,
                                const std::vector<std::pair<std::string, double>>& values) {
  return file_.append(tb_events::scalars(now_s(), step, values));
}

bool TensorBoardWriter::text(int64_t step, const std::string& tag, const std::string& markdown) {
  return file_.append(tb_events::text(now_s(), step, tag, markdown));
}

bool TensorBoardWriter::hparams(int64_t step, const nlohmann::json& hparams,
                                const std::vector<std::string>& metrics, const std::string& group) {
  for (const std::string& rec :
       tb_events::hparams(now_s(), step, start_time_, hparams, metrics, group))
    if (!file_.append(rec)) return false;
  return true;
}

bool TensorBoardWriter::session_end(int64_t step, bool success) {
  return file_.append(tb_events::session_end(now_s(), step, success));
}

}  // namespace shardtrain::obs
