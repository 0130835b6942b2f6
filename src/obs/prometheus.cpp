#include "shardtrain/obs/prometheus.h"

#include <algorithm>

#include <cmath>
#include <cstdio>
#include <functional>

namespace shardtrain::obs {

const char* group_name(int g) {
  static const char* names[RankSeries::kProcessGroups] = {"world", "shard", "replicate", "context"};
  return names[g];
}

int RankSeries::packed_size() {
  return 7 + runtime::kNumPhases + 6 + kNumPreferenceMetrics + 2 * kProcessGroups * comm::kNumOps;
}

std::vector<double> RankSeries::pack() const {
  std::vector<double> v = {step, loss, lr, tokens_per_s, tflops_per_device, mfu, step_seconds};
  v.insert(v.end(), phases.s.begin(), phases.s.end());
  v.insert(v.end(), {host_peak_rss, gpu_peak_allocated, gpu_peak_reserved, checkpoint_seconds,
                     skipped_steps, pairs});
  v.insert(v.end(), preference.begin(), preference.end());
  for (const auto* table : {&calls, &bytes})
    for (const auto& g : *table) v.insert(v.end(), g.begin(), g.end());
  return v;
}

RankSeries RankSeries::unpack(const double* v, int rank, const std::string& host) {
  RankSeries r;
  r.rank = rank;
  r.host = host;
  r.step = v[0];
  r.loss = v[1];
  r.lr = v[2];
  r.tokens_per_s = v[3];
  r.tflops_per_device = v[4];
  r.mfu = v[5];
  r.step_seconds = v[6];
  int i = 7;
  for (auto& p : r.phases.s) p = v[i++];
  r.host_peak_rss = v[i++];
  r.gpu_peak_allocated = v[i++];
  r.gpu_peak_reserved = v[i++];
  r.checkpoint_seconds = v[i++];
  r.skipped_steps = v[i++];
  r.pairs = v[i++];
  for (auto& x : r.preference) x = v[i++];
  for (auto* table : {&r.calls, &r.bytes})
    for (auto& g : *table)
      for (auto& x : g) x = v[i++];
  return r;
}

std::string escape_label_value(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

namespace {
std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);  // round-trips: the scrape equals the JSONL value
  return buf;
}
}  // namespace

std::string exposition(const std::string& job, const std::vector<RankSeries>& ranks) {
  std::string out;
  const std::string job_l = "job=\"" + escape_label_value(job) + "\"";
  // One family: HELP and TYPE once, then a sample per rank (and per extra label set).
  auto family =
      [&](const std::string& name, const char* type, const std::string& help,
          const std::function<void(const RankSeries&, const std::string& base)>& samples) {
        out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
        for (const auto& r : ranks)
          samples(r, job_l + ",host=\"" + escape_label_value(r.host) + "\",rank=\"" +
                         std::to_string(r.rank) + "\"");
      };
  auto single = [&](const char* type, const std::string& name, const std::string& help,
                    double RankSeries::*field) {
    family(name, type, help, [&](const RankSeries& r, const std::string& l) {
      out += name + "{" + l + "} " + number(r.*field) + "\n";
    });
  };
  auto gauge = [&](const std::string& name, const std::string& help, double RankSeries::*field) {
    single("gauge", name, help, field);
  };
  gauge("shardtrain_step", "Last completed optimizer step.", &RankSeries::step);
  gauge("shardtrain_loss", "Training loss of the last step (mean over the global batch).",
        &RankSeries::loss);
  gauge("shardtrain_learning_rate", "Learning rate of the last step.", &RankSeries::lr);
  gauge("shardtrain_tokens_per_second",
        "Input tokens per second of the whole job in the last step (the metrics file's; the same "
        "on every rank).",
        &RankSeries::tokens_per_s);
  gauge("shardtrain_tflops_per_device",
        "Model TFLOP/s per device of the last step, the job's mean (the metrics file's).",
        &RankSeries::tflops_per_device);
  gauge("shardtrain_mfu",
        "Model FLOPs utilization of the last step (0..1), the job's (the metrics file's).",
        &RankSeries::mfu);
  gauge("shardtrain_step_seconds",
        "This rank's wall time of the last step: data, forward, backward, optimizer.",
        &RankSeries::step_seconds);
  family("shardtrain_phase_seconds", "gauge",
         "This rank's last step by phase; compute phases exclude exposed_comm.",
         [&](const RankSeries& r, const std::string& l) {
           for (int p = 0; p < runtime::kNumPhases; ++p)
             out += "shardtrain_phase_seconds{" + l + ",phase=\"" +
                    runtime::phase_name(static_cast<runtime::Phase>(p)) + "\"} " +
                    number(r.phases.s[p]) + "\n";
         });
  family("shardtrain_memory_bytes", "gauge",
         "Peak memory: host resident set, GPU allocated and reserved.",
         [&](const RankSeries& r, const std::string& l) {
           out += "shardtrain_memory_bytes{" + l + ",kind=\"host_peak_rss\"} " +
                  number(r.host_peak_rss) + "\n";
           if (r.gpu_peak_allocated >= 0) {
             out += "shardtrain_memory_bytes{" + l + ",kind=\"gpu_peak_allocated\"} " +
                    number(r.gpu_peak_allocated) + "\n";
             out += "shardtrain_memory_bytes{" + l + ",kind=\"gpu_peak_reserved\"} " +
                    number(r.gpu_peak_reserved) + "\n";
           }
         });
  gauge("shardtrain_checkpoint_seconds", "Duration of the last checkpoint save.",
        &RankSeries::checkpoint_seconds);
  single("counter", "shardtrain_skipped_steps_total",
         "Optimizer steps skipped for a non-finite loss or gradient norm (--on-nonfinite skip).",
         &RankSeries::skipped_steps);
  if (std::any_of(ranks.begin(), ranks.end(), [](const RankSeries& r) { return r.pairs > 0; }))
    family("shardtrain_preference", "gauge",
           "DPO's metrics of the last step over the global batch's pairs, TRL's names (the "
           "metrics file's; the same on every rank).",
           [&](const RankSeries& r, const std::string& l) {
             for (int k = 0; k < kNumPreferenceMetrics; ++k)
               out += "shardtrain_preference{" + l + ",metric=\"" + kPreferenceMetricNames[k] +
                      "\"} " + number(r.preference[k]) + "\n";
           });
  auto per_collective = [&](const std::string& name, const std::string& help, bool bytes) {
    family(name, "counter", help, [&](const RankSeries& r, const std::string& l) {
      for (int g = 0; g < RankSeries::kProcessGroups; ++g)
        for (int k = 0; k < comm::kNumOps; ++k)
          out += name + "{" + l + ",group=\"" + group_name(g) + "\",op=\"" +
                 comm::op_name(static_cast<comm::Op>(k)) + "\"} " +
                 number(bytes ? r.bytes[g][k] : r.calls[g][k]) + "\n";
    });
  };
  per_collective("shardtrain_collectives_total",
                 "Collectives issued since start, by group and kind.", false);
  per_collective("shardtrain_collective_bytes_total",
                 "Bytes of the full buffers of those collectives.", true);
  return out;
}

}  // namespace shardtrain::obs
