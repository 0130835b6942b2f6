#include "shardtrain/train/tensorboard_sink.h"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "shardtrain/runtime/logging.h"
#include "shardtrain/train/metric_scalars.h"

namespace shardtrain::train {
namespace {

// The HParams dashboard's columns: what runs are compared by.
const std::vector<std::string> kCompared = {"loss", "val_loss", "val_exact_match", "tokens_per_s",
                                            "mfu"};

std::string cell(const nlohmann::json& v) {  // a markdown table cell: strings bare, pipes escaped
  std::string s = v.is_string() ? v.get<std::string>() : v.dump();
  for (size_t i = s.find('|'); i != std::string::npos; i = s.find('|', i + 2))
    s.replace(i, 1, "\\|");
  return s;
}

}  // namespace

std::string config_markdown(const RunParams& run) {
  std::string md =
      "Command line:\n\n    shardtrain train";  // indented: a code block, shown verbatim
  for (const auto& a : run.args) md += " " + a;
  md += "\n\n| setting | value |\n|---|---|\n";
  for (const auto& [name, value] : run.values.items())
    md += "| " + name + " | " + cell(value) + " |\n";
  return md;
}

TensorBoardSink::TensorBoardSink(const std::string& dir, const std::string& run_name,
                                 const std::string& host, int64_t start_step,
                                 const RunParams& run) {
  const int64_t first =
      start_step > 0 ? start_step + 1 : 0;  // a fresh run from step 0: its initial validation
  writer_ = std::make_unique<obs::TensorBoardWriter>(
      (std::filesystem::path(dir) / run_name).string(), host, first);
  last_step_ = first;
  path_ = writer_->path();
  check(writer_->text(first, "config", config_markdown(run)));
  if (writer_) check(writer_->hparams(first, run.values, kCompared, run_name));
  if (writer_) check(writer_->flush());
}

void TensorBoardSink::write(int64_t step, const std::vector<MetricScalar>& scalars) {
  if (!writer_) return;
  std::vector<std::pair<std::string, double>> values;
  values.reserve(scalars.size());
  for (const auto& s : scalars) values.emplace_back(s.tag, s.value);
  last_step_ = step;
  check(writer_->scalars(last_step_, values));
}

void TensorBoardSink::flush() {
  if (writer_) check(writer_->flush());
}

void TensorBoardSink::end(obs::RunStatus status) {
  if (writer_ && status != obs::RunStatus::kKilled)
    check(writer_->session_end(last_step_, status == obs::RunStatus::kFinished));
  flush();
}

void TensorBoardSink::check(bool ok) {
  if (ok) return;
  runtime::log::warn("--tensorboard: cannot write " + path_ + " (" + std::strerror(errno) +
                     "); no more TensorBoard records this run, training goes on");
  writer_.reset();  // its close flushes what it can
}

}  // namespace shardtrain::train
