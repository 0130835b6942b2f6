#include "shardtrain/train/profile_summary.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <regex>
#include <utility>

namespace shardtrain::train {

const char* kernel_kind_name(KernelKind k) {
  static const char* names[] = {"GEMM",      "attention",     "elementwise and other",
                                "optimizer", "communication", "memory copies"};
  return names[static_cast<int>(k)];
}

KernelKind kind_by_name(const std::string& name) {
  using std::regex;
  static const regex comm(
      "nccl|c10d|allgather|all_gather|reducescatter|reduce_scatter|allreduce|all_reduce|mpi_",
      regex::icase);
  static const regex memory(
      "^memcpy|^memset|aten::copy_$|aten::to$|aten::_to_copy$|aten::fill_$|aten::zero_$",
      regex::icase);
  static const regex optim("adam", regex::icase);
  static const regex attn("flash|fmha|attention|sdpa|_efficient_attention|mha_", regex::icase);
  static const regex gemm(
      "gemm|nvjet|cutlass|cublas|xmma|^aten::(mm|addmm|bmm|baddbmm|matmul|linear)$", regex::icase);
  if (std::regex_search(name, comm)) return KernelKind::kCommunication;
  if (std::regex_search(name, memory)) return KernelKind::kMemory;
  if (std::regex_search(name, optim)) return KernelKind::kOptimizer;
  if (std::regex_search(name, attn)) return KernelKind::kAttention;
  if (std::regex_search(name, gemm)) return KernelKind::kGemm;
  return KernelKind::kElementwise;
}

namespace {

using Range = std::pair<int64_t, int64_t>;

bool inside(int64_t t, const std::vector<Range>& ranges) {
  return t >= 0 && std::any_of(ranges.begin(), ranges.end(),
                               [t](const Range& r) { return t >= r.first && t < r.second; });
}

struct Item {
  const ProfileEvent* e;
  int64_t own_ns;  // a host op's time less its direct children's: what it spent itself
};

// Every item once: device events as they are, or else host ops with their own time.
std::vector<Item> work_items(const std::vector<ProfileEvent>& events, bool device) {
  std::vector<Item> items;
  for (const auto& e : events)
    if (e.device == device) items.push_back({&e, e.end_ns - e.start_ns});
  if (device) return items;
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    if (a.e->thread != b.e->thread) return a.e->thread < b.e->thread;
    return a.e->start_ns != b.e->start_ns ? a.e->start_ns < b.e->start_ns
                                          : a.e->end_ns > b.e->end_ns;  // parents first
  });
  std::vector<size_t> open;
  for (size_t i = 0; i < items.size(); ++i) {
    const ProfileEvent& e = *items[i].e;
    while (!open.empty() &&
           (items[open.back()].e->thread != e.thread || items[open.back()].e->end_ns <= e.start_ns))
      open.pop_back();
    if (!open.empty()) items[open.back()].own_ns -= e.end_ns - e.start_ns;
    open.push_back(i);
  }
  for (auto& it : items) it.own_ns = std::max<int64_t>(0, it.own_ns);
  return items;
}

}  // namespace

ProfileSummary summarize_profile(const std::vector<ProfileEvent>& events,
                                 const std::vector<Range>& optimizer_ranges,
                                 const std::vector<Range>& device_optimizer_ranges, size_t top_n) {
  ProfileSummary s;
  s.device =
      std::any_of(events.begin(), events.end(), [](const ProfileEvent& e) { return e.device; });
  std::vector<Item> work = work_items(events, s.device);
  if (work.empty()) return s;
  std::sort(work.begin(), work.end(),
            [](const Item& a, const Item& b) { return a.e->start_ns < b.e->start_ns; });
  int64_t first = work.front().e->start_ns, last = work.front().e->end_ns, run_start = first,
          run_end = first;
  std::map<std::pair<std::string, bool>, KernelTotal>
      totals;  // by name, and whether the optimizer ran it
  for (const Item& it : work) {
    const ProfileEvent* e = it.e;
    last = std::max(last, e->end_ns);
    if (e->start_ns > run_end) {
      s.busy_ns += run_end - run_start;
      run_start = e->start_ns;
      run_end = e->start_ns;
    }
    run_end = std::max(run_end, e->end_ns);
    const int64_t mid = e->start_ns + (e->end_ns - e->start_ns) / 2;
    const bool optim =
        e->device ? inside(mid, device_optimizer_ranges) || inside(e->launch_ns, optimizer_ranges)
                  : inside(mid, optimizer_ranges);
    KernelKind kind = kind_by_name(e->name);
    if (optim && kind != KernelKind::kCommunication)
      kind = KernelKind::kOptimizer;  // the clip's norm too
    auto& t = totals[{e->name, optim}];
    t.name = e->name;
    t.kind = kind;
    t.calls += 1;
    t.ns += it.own_ns;
    s.kind_ns[static_cast<int>(kind)] += it.own_ns;
  }
  s.busy_ns += run_end - run_start;
  s.span_ns = last - first;
  s.items = static_cast<int64_t>(work.size());
  for (auto& [_, t] : totals) s.top.push_back(t);
  std::sort(s.top.begin(), s.top.end(),
            [](const KernelTotal& a, const KernelTotal& b) { return a.ns > b.ns; });
  if (s.top.size() > top_n) s.top.resize(top_n);
  return s;
}

std::string format_profile(const ProfileSummary& s, int64_t step, const std::string& what) {
  char buf[512];
  std::string out;
  const char* unit = s.device ? "GPU kernels" : "host ops (no GPU events: a CPU run)";
  std::snprintf(buf, sizeof buf, "### Profile of step %lld (%s): %lld %s over %.2f ms\n\n",
                static_cast<long long>(step), what.c_str(), static_cast<long long>(s.items), unit,
                s.span_ns / 1e6);
  out += buf;
  out += "| share of the step's span | % |\n|---|---:|\n";
  for (int k = 0; k < static_cast<int>(KernelKind::kCount); ++k) {
    std::snprintf(buf, sizeof buf, "| %s | %.1f |\n", kernel_kind_name(static_cast<KernelKind>(k)),
                  100 * s.share(static_cast<KernelKind>(k)));
    out += buf;
  }
  std::snprintf(buf, sizeof buf, "| %s | %.1f |\n\n",
                s.device ? "launch gaps (GPU idle)" : "gaps (host overhead between ops)",
                100 * s.gap_share());
  out += buf;
  out +=
      "Shares add up to 100% when no two kernels overlap; communication on its own streams "
      "overlaps compute.\n\n";
  out += "| # | kernel | kind | calls | total ms | % of span |\n|---:|---|---|---:|---:|---:|\n";
  for (size_t i = 0; i < s.top.size(); ++i) {
    std::string name = s.top[i].name;
    if (name.size() > 90) name = name.substr(0, 87) + "...";
    for (auto& c : name)
      if (c == '|') c = '/';
    std::snprintf(buf, sizeof buf, "| %zu | `%s` | %s | %lld | %.3f | %.1f |\n", i + 1,
                  name.c_str(), kernel_kind_name(s.top[i].kind),
                  static_cast<long long>(s.top[i].calls), s.top[i].ns / 1e6,
                  s.span_ns ? 100.0 * s.top[i].ns / s.span_ns : 0.0);
    out += buf;
  }
  return out;
}

}  // namespace shardtrain::train
