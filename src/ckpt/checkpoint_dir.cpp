#include "shardtrain/ckpt/checkpoint_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/file_sync.h"

namespace fs = std::filesystem;

namespace shardtrain::ckpt {
namespace {

// step-00000040.h5 -> 40; -1 for any other name.
int64_t step_of(const fs::path& p) {
  const std::string n = p.filename().string();
  if (n.rfind("step-", 0) != 0 || p.extension() != ".h5") return -1;
  char* end = nullptr;
  const long long s = std::strtoll(n.c_str() + 5, &end, 10);
  return end && std::string(end) == ".h5" ? s : -1;
}

// What dir/latest holds: the file name of the newest complete checkpoint ("" when absent).
std::string latest_name(const fs::path& dir) {
  std::ifstream in(dir / "latest");
  std::string name;
  if (in) in >> name;
  return name;
}

}  // namespace

std::string step_path(const std::string& dir, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld.h5", static_cast<long long>(step));
  return (fs::path(dir) / name).string();
}

std::vector<std::string> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  if (dir.empty() || !fs::is_directory(dir, ec)) return {};
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (const int64_t s = step_of(e.path()); s >= 0) found.emplace_back(s, e.path().string());
  std::sort(found.begin(), found.end());
  std::vector<std::string> all;
  for (auto& f : found) all.push_back(std::move(f.second));
  return all;
}

void publish(const std::string& tmp, const std::string& final_path, int keep) {
  runtime::sync_best_effort(tmp);
  fs::rename(tmp, final_path);
  const auto dir = fs::path(final_path).parent_path();
  { std::ofstream(dir / "latest.tmp") << fs::path(final_path).filename().string() << "\n"; }
  runtime::sync_best_effort((dir / "latest.tmp").string());
  fs::rename(dir / "latest.tmp", dir / "latest");
  runtime::sync_best_effort(dir.string());
  if (keep <= 0) return;
  // Only this run's history counts: files past the one just published are not it (and stay).
  std::vector<std::string> older;
  for (const auto& p : list_checkpoints(dir.string()))
    if (step_of(p) <= step_of(final_path)) older.push_back(p);
  for (size_t i = 0; i + keep < older.size(); ++i) fs::remove(older[i]);
}

std::string latest_checkpoint(const std::string& dir) {
  const std::string name = latest_name(dir);
  return name.empty() ? "" : (fs::path(dir) / name).string();
}

std::vector<std::string> resume_candidates(const std::string& spec, const std::string& dir) {
  if (spec != "auto") return {spec};
  auto all = list_checkpoints(dir);
  std::reverse(all.begin(), all.end());
  const std::string latest = latest_checkpoint(dir);
  if (latest.empty()) return all;
  // Newer files than `latest` are not this run's history (another run's, or a save `latest` never
  // named).
  const int64_t latest_step = step_of(latest);
  std::vector<std::string> order{latest};
  for (const auto& p : all)
    if (step_of(p) < latest_step) order.push_back(p);
  return order;
}

std::string resolve_checkpoint(const std::string& spec, const std::string& opt) {
  std::error_code ec;
  const fs::path p(spec);
  if (fs::is_directory(p, ec) || p.filename() == "latest") {
    const fs::path dir = fs::is_directory(p, ec) ? p : p.parent_path();
    if (!fs::exists(dir, ec)) throw runtime::UsageError(opt + ": " + spec + " does not exist");
    const std::string name = latest_name(dir);
    const auto all = list_checkpoints(dir.string());
    if (name.empty() && !all.empty())
      return all.back();  // no `latest` (an older layout): the newest
    if (name.empty())
      throw runtime::UsageError(
          opt + ": " + dir.string() +
          " has no `latest` file (no checkpoint was completed there); pass a " +
          "checkpoint file such as " + step_path(dir.string(), 100));
    const fs::path target = dir / name;
    if (!fs::exists(target, ec))
      throw runtime::UsageError(opt + ": " + (dir / "latest").string() + " names " + name +
                                ", which does not exist; pass one of " + "the step-*.h5 files in " +
                                dir.string());
    return target.string();
  }
  if (!fs::exists(p, ec)) throw runtime::UsageError(opt + ": " + spec + " does not exist");
  return spec;
}

bool holds_checkpoints(const std::string& dir) {
  std::error_code ec;
  return !list_checkpoints(dir).empty() || fs::exists(fs::path(dir) / "latest", ec);
}

int remove_checkpoints(const std::string& dir) {
  int n = 0;
  for (const auto& p : list_checkpoints(dir)) n += fs::remove(p) ? 1 : 0;
  std::error_code ec;
  n += fs::remove(fs::path(dir) / "latest", ec) ? 1 : 0;
  return n;
}

bool is_checkpoint_input(const std::string& path) {
  const fs::path p(path);
  std::error_code ec;
  if (!fs::is_directory(p, ec)) return p.extension() == ".h5" || p.filename() == "latest";
  if (fs::exists(p / "config.json", ec)) return false;  // a Hugging Face model directory
  if (holds_checkpoints(path)) return true;
  throw runtime::UsageError(
      "--input " + path +
      " is neither a Hugging Face model directory (no config.json) nor a checkpoint "
      "directory (no latest or step-*.h5); pass one of those or a step-N.h5 file");
}

}  // namespace shardtrain::ckpt
