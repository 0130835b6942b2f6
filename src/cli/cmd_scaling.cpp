// `shardtrain scaling`: reads one metrics file per node count and writes a markdown table, a CSV
// and a two-panel PNG of throughput and scaling efficiency. Serial work; under mpirun rank 0 does it.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "shardtrain/cli/commands.h"
#include "shardtrain/report/chart.h"
#include "shardtrain/report/scaling.h"
#include "shardtrain/runtime/error.h"

namespace fs = std::filesystem;

namespace shardtrain::cli {
namespace {

double number_or_nan(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : std::nan("");
}

// The lines that carry tokens_per_s, in file order. A final line that does not parse is a write
// cut short by a killed job, so it is dropped with a note; any other bad line is an error.
report::RunSteps read_run(const ScalingRun& run, std::vector<std::string>& notes) {
  std::ifstream in(run.metrics);
  if (!in) throw UsageError("--run " + std::to_string(run.nodes) + ":" + run.metrics + ": cannot open the file");
  report::RunSteps steps;
  steps.nodes = run.nodes, steps.source = run.metrics;
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    if (line.find_first_not_of(" \t\r") != std::string::npos) lines.push_back(line);
  for (size_t i = 0; i < lines.size(); ++i) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(lines[i]);
    } catch (const nlohmann::json::exception&) {
      if (i + 1 == lines.size() && i > 0) {
        notes.push_back(run.metrics + ": ignored its last line, which is not complete JSON");
        break;
      }
      throw UsageError("--run " + std::to_string(run.nodes) + ":" + run.metrics + ": line " + std::to_string(i + 1) +
                       " is not JSON; pass the JSONL that train --metrics-file wrote");
    }
    const double tps = j.is_object() ? number_or_nan(j, "tokens_per_s") : std::nan("");
    if (!std::isfinite(tps)) continue;  // validation-only lines (step 0) carry no throughput
    steps.tokens_per_s.push_back(tps);
    steps.mfu.push_back(number_or_nan(j, "mfu"));
  }
  if (steps.tokens_per_s.empty())
    throw UsageError("--run " + std::to_string(run.nodes) + ":" + run.metrics +
                     ": no line has a numeric tokens_per_s; pass the JSONL that train --metrics-file wrote");
  return steps;
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) throw Error("cannot write " + path.string());
}

}  // namespace

int cmd_scaling(const std::vector<std::string>& args, MpiEnv& env) {
  std::string help;
  ScalingOptions o = parse_scaling(args, &help);
  if (o.common.help) return print_help(help, env);
  if (env.rank() != 0) return 0;
  std::vector<std::string> notes;
  std::vector<report::RunSummary> runs;
  for (const auto& run : o.runs) {
    runs.push_back(report::summarize_run(read_run(run, notes), o.skip_steps));
    const auto& s = runs.back();
    if (s.kept_warmup)
      notes.push_back(s.source + " (" + std::to_string(s.nodes) + " nodes) has only " + std::to_string(s.steps) +
                      " measured steps, not more than --skip-steps " + std::to_string(o.skip_steps) +
                      ", so all of them were used, warmup included");
  }
  const auto rows = report::scaling_rows(runs);
  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  if (!fs::is_directory(o.out_dir))
    throw UsageError("--out-dir " + o.out_dir + ": cannot create the directory" + (ec ? " (" + ec.message() + ")" : ""));
  const fs::path dir(o.out_dir);
  const std::string md = report::scaling_markdown(rows, o.title, notes);
  write_text(dir / "scaling.md", md);
  write_text(dir / "scaling.csv", report::scaling_csv(rows));
  report::draw_chart_png((dir / "scaling.png").string(), report::scaling_panels(rows, o.title), 2);
  std::cout << md << "\nwrote " << (dir / "scaling.md").string() << ", scaling.csv and scaling.png" << std::endl;
  return 0;
}

}  // namespace shardtrain::cli
