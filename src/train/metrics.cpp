#include "shardtrain/train/metrics.h"

#include <sys/resource.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "shardtrain/obs/prometheus.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::train {

namespace {
void fill_rates(StepMetrics& m, double tokens, double seconds, double flops_per_token,
                double peak_tflops, int world_size) {
  if (seconds <= 0) return;
  m.tokens_per_s = tokens / seconds;
  m.tflops_per_device = m.tokens_per_s * flops_per_token / world_size / 1e12;
  m.mfu = peak_tflops > 0 ? m.tflops_per_device / peak_tflops : 0.0;
}
}  // namespace

void fill_throughput(StepMetrics& m, int64_t input_tokens, double flops_per_token,
                     double peak_tflops, int world_size) {
  fill_rates(m, static_cast<double>(input_tokens), m.step_time_s, flops_per_token, peak_tflops,
             world_size);
}

void IntervalThroughput::add(int64_t input_tokens, double step_time_s) {
  tokens_ += input_tokens;
  seconds_ += step_time_s;
  ++steps_;
}

void IntervalThroughput::take(StepMetrics& m, double flops_per_token, double peak_tflops,
                              int world_size) {
  if (steps_ > 0 && seconds_ > 0) {
    fill_rates(m, static_cast<double>(tokens_), seconds_, flops_per_token, peak_tflops, world_size);
    m.step_time_s = seconds_ / static_cast<double>(steps_);
  }
  *this = IntervalThroughput();
}

int64_t peak_host_memory_bytes() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<int64_t>(ru.ru_maxrss) * 1024;  // Linux reports KiB
}

MetricsWriter::MetricsWriter(const std::string& path, int64_t keep_through_step) {
  if (path.empty()) return;
  std::string kept;
  if (keep_through_step > 0) {
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (j.is_object() && j.value("step", int64_t{0}) <= keep_through_step) kept += line + "\n";
    }
  }
  const auto parent = std::filesystem::path(path).parent_path();
  std::error_code ec;  // runs/<job>/metrics.jsonl: make the directory, as --checkpoint-dir does
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  {  // the kept steps replace the file in one rename: a crash here never loses the history
    std::ofstream tmp(path + ".tmp", std::ios::trunc);
    tmp << kept;
    if (!tmp.flush())
      throw runtime::UsageError("--metrics-file: cannot write " + path +
                                ".tmp; check that its directory is writable");
  }
  std::filesystem::rename(path + ".tmp", path, ec);
  if (ec)
    throw runtime::UsageError("--metrics-file: cannot replace " + path + " (" + ec.message() + ")");
  out_.open(path, std::ios::app);
  if (!out_) throw runtime::UsageError("--metrics-file: cannot write " + path);
}

nlohmann::json metrics_line(const StepMetrics& m) {
  nlohmann::json j = {{"step", m.step},
                      {"epoch", m.epoch},
                      {"loss", m.loss},
                      {"lr", m.lr},
                      {"grad_norm", m.grad_norm},
                      {"tokens", m.tokens},
                      {"tokens_per_s", m.tokens_per_s},
                      {"tflops_per_device", m.tflops_per_device},
                      {"mfu", m.mfu},
                      {"step_time_s", m.step_time_s},
                      {"peak_mem_bytes", m.peak_mem_bytes}};
  if (m.step > 0) {
    j["skipped_steps"] = m.skipped_steps;
    if (m.skipped) j["skipped"] = true;
    j["eta_s"] = m.eta_s;
    for (int p = 0; p < runtime::kNumPhases; ++p)
      j["phases"][runtime::phase_name(static_cast<runtime::Phase>(p))] = m.phases.s[p];
  }
  for (const auto& [prefix, pm] : {std::pair{"", &m.preference}, {"val_", &m.val_preference}}) {
    if (pm->pairs == 0) continue;
    for (int k = 0; k < obs::kNumPreferenceMetrics; ++k)
      j[std::string(prefix) + obs::kPreferenceMetricNames[k]] = pm->values[k];
  }
  if (m.aux_loss >= 0) j["aux_loss"] = m.aux_loss;
  if (m.val_loss >= 0) j["val_loss"] = m.val_loss;
  if (m.val_accuracy >= 0) j["val_exact_match"] = m.val_accuracy;
  if (m.extra.is_object()) j.update(m.extra);
  return j;
}

void MetricsWriter::write(const nlohmann::json& line) {
  if (!out_.is_open()) return;
  out_ << line.dump() << "\n";
  out_.flush();
}

std::string format_duration(double secs) {
  char buf[32];
  const long long t = static_cast<long long>(secs + 0.5);
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", t / 3600, t / 60 % 60);
  else if (t >= 60)
    std::snprintf(buf, sizeof buf, "%lldm%02llds", t / 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%llds", t);
  return buf;
}

std::string progress_line(const StepMetrics& m, int64_t total_steps) {
  char buf[384];
  std::snprintf(
      buf, sizeof buf,
      "step %lld/%lld | loss %.4f | lr %.3e | grad_norm %.3f | %.0f tok/s | %.3f TFLOP/s/device | "
      "MFU %.2f%% | %.3f s/step | ETA %s | mem %.0f MiB",
      static_cast<long long>(m.step), static_cast<long long>(total_steps), m.loss, m.lr,
      m.grad_norm, m.tokens_per_s, m.tflops_per_device, 100.0 * m.mfu, m.step_time_s,
      format_duration(m.eta_s).c_str(), static_cast<double>(m.peak_mem_bytes) / (1 << 20));
  std::string s = buf;
  if (m.preference.pairs > 0) {  // DPO: TRL's two headline figures
    std::snprintf(buf, sizeof buf, " | rewards/accuracies %.3f | rewards/margins %.4f",
                  m.preference.values[2], m.preference.values[3]);
    s += buf;
  }
  if (m.aux_loss >= 0) {
    std::snprintf(buf, sizeof buf, " | aux_loss %.4f", m.aux_loss);
    s += buf;
  }
  if (m.val_loss >= 0) {
    std::snprintf(buf, sizeof buf, " | val_loss %.4f", m.val_loss);
    s += buf;
  }
  if (m.val_preference.pairs > 0) {
    std::snprintf(buf, sizeof buf, " | val rewards/accuracies %.3f", m.val_preference.values[2]);
    s += buf;
  }
  if (m.val_accuracy >= 0) {
    std::snprintf(buf, sizeof buf, " | exact_match %.1f%%", 100.0 * m.val_accuracy);
    s += buf;
  }
  return s;
}

}  // namespace shardtrain::train
