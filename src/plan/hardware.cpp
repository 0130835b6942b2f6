#include "shardtrain/plan/hardware.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <type_traits>

#include "shardtrain/comm/bus_bandwidth.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::plan {
namespace {

using Points = std::vector<std::pair<double, double>>;
constexpr double kMiB = 1048576.0;

// Published tables (docs/planner.md gives each source): (total bytes, busbw GB/s) and the
// ranks they were measured on; keyed by bytes per rank once loaded.
const Points kP5IntraAllReduce = {
    {1048576, 64.24},     {2097152, 84.47},     {4194304, 132.41},    {8388608, 174.16},
    {16777216, 236.82},   {33554432, 295.63},   {67108864, 359.54},   {134217728, 396.19},
    {268435456, 418.91},  {536870912, 433.90},  {1073741824, 441.81}, {2147483648, 444.02},
    {4294967296, 475.97}, {8589934592, 480.43}, {17179869184, 483.05}};
const Points kP5InterAllGather = {{32 * kMiB, 131.30},  {64 * kMiB, 200.43},  {128 * kMiB, 234.54},
                                  {256 * kMiB, 215.58}, {512 * kMiB, 275.52}, {1024 * kMiB, 322.00},
                                  {2048 * kMiB, 328.58}};
const Points kP5InterAllReduce = {
    {1048576, 15.95},     {2097152, 26.70},     {4194304, 46.64},     {8388608, 76.80},
    {16777216, 105.52},   {33554432, 143.09},   {67108864, 209.19},   {134217728, 289.16},
    {268435456, 342.81},  {536870912, 393.34},  {1073741824, 436.95}, {2147483648, 443.72},
    {4294967296, 465.87}, {8589934592, 479.28}, {17179869184, 487.09}};
const Points kA100IntraAllReduce = {
    {1048576, 36.22},     {2097152, 53.54},    {4194304, 71.43},     {8388608, 89.99},
    {16777216, 109.22},   {33554432, 132.77},  {67108864, 166.63},   {134217728, 174.18},
    {268435456, 213.87},  {536870912, 221.58}, {1073741824, 228.10}, {2147483648, 230.22},
    {4294967296, 230.48}, {8589934592, 231.58}};
const Points kP4deInterAllReduce = {{1048576, 6.35},    {2097152, 9.09},     {4194304, 14.73},
                                    {8388608, 20.62},   {16777216, 26.39},   {33554432, 40.85},
                                    {67108864, 47.58},  {134217728, 64.31},  {268435456, 69.89},
                                    {536870912, 74.28}, {1073741824, 76.79}, {2147483648, 78.33}};
constexpr double kH100RingBusbw =
    370;  // NVIDIA's figure for all-gather and reduce-scatter over NVLink 4

BandwidthTable per_rank(const Points& total, int ranks, double busbw_cap = 0) {
  BandwidthTable t;
  for (const auto& [bytes, bw] : total)
    t.points.emplace_back(bytes / ranks, busbw_cap > 0 ? std::min(bw, busbw_cap) : bw);
  std::sort(t.points.begin(), t.points.end());
  return t;
}

Fabric published(const std::string& name) {
  Fabric f;
  f.name = name;
  using comm::Op;
  if (name == "p5") {
    f.source = "published nccl-tests figures for p5.48xlarge (docs/planner.md)";
    f.instances =
        "p5.48xlarge (8x H100) and p5e (8x H200)";  // NVLink 4 and 3,200 Gbit/s EFA on both
    f.gpus = {"h100-80gb", "h200-141gb"};
    f.intra[Op::kAllReduce] = per_rank(kP5IntraAllReduce, 8);
    f.intra[Op::kReduceScatter] = per_rank(kP5IntraAllReduce, 8, kH100RingBusbw);
    f.intra[Op::kAllGather] = f.intra[Op::kReduceScatter];
    f.inter[Op::kReduceScatter] = per_rank(kP5InterAllGather, 16);
    f.inter[Op::kAllGather] = f.inter[Op::kReduceScatter];
    f.inter[Op::kAllReduce] = per_rank(kP5InterAllReduce, 16);
  } else {
    f.source =
        "published nccl-tests figures for 8x A100 NVSwitch nodes and 2x p4de.24xlarge "
        "(docs/planner.md)";
    f.instances = "p4de.24xlarge (8x A100 80GB) and p4d (8x A100 40GB)";  // NVLink 3 and 400 Gbit/s
                                                                          // EFA on both
    f.gpus = {"a100-80gb", "a100-40gb"};
    f.intra[Op::kReduceScatter] = per_rank(kA100IntraAllReduce, 8);
    f.intra[Op::kAllGather] = f.intra[Op::kReduceScatter];
    f.intra[Op::kAllReduce] = f.intra[Op::kReduceScatter];
    f.inter[Op::kReduceScatter] = per_rank(kP4deInterAllReduce, 16);
    f.inter[Op::kAllGather] = f.inter[Op::kReduceScatter];
    f.inter[Op::kAllReduce] = f.inter[Op::kReduceScatter];
  }
  return f;
}

comm::Op op_named(const std::string& s, const std::string& file) {
  if (s == "all_gather") return comm::Op::kAllGather;
  if (s == "reduce_scatter") return comm::Op::kReduceScatter;
  if (s == "all_reduce") return comm::Op::kAllReduce;
  throw runtime::UsageError("--fabric " + file + ": unknown collective '" + s +
                            "'; use all_gather, reduce_scatter, all_reduce");
}

const char* json_type(const nlohmann::json& v) {
  if (v.is_number_integer()) return "an integer";
  if (v.is_number_float()) return "a float";
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "a boolean";
  if (v.is_array()) return "an array";
  return v.is_object() ? "an object" : "null";
}

// j[key] when it has the JSON type of T (an integer for int), `fallback` when absent; any other
// type is exit 2 naming the field, where json::value would throw a library error.
template <typename T>
T field(const nlohmann::json& j, const std::string& key, T fallback, const std::string& file,
        const std::string& where = "") {
  const auto it = j.find(key);
  if (it == j.end()) return fallback;
  const bool ok = std::is_same_v<T, bool> ? it->is_boolean()
                  : std::is_integral_v<T> ? it->is_number_integer()
                                          : it->is_string();
  if (!ok)
    throw runtime::UsageError("--fabric " + file + ": field \"" + where + key + "\" is " +
                              json_type(*it) + " (" + it->dump() + "), expected " +
                              (std::is_same_v<T, bool> ? "true or false"
                               : std::is_integral_v<T> ? "an integer"
                                                       : "a string") +
                              "; write the file with `shardtrain preflight --json FILE`");
  return it->get<T>();
}

// A scope of a fabric file: {"ranks": n, "groups_per_node": g, "all_gather": [[bytes, busbw], ...],
// ...}. preflight's inter-node scope runs one rank per node in g groups at once, so the node's
// links carry g groups' traffic: a spanning collective of g x bytes moves what they moved together.
std::map<comm::Op, BandwidthTable> read_scope(const nlohmann::json& j, const std::string& file,
                                              const std::string& scope) {
  std::map<comm::Op, BandwidthTable> out;
  if (!j.is_object())
    throw runtime::UsageError(
        "--fabric " + file + ": field \"" + scope + "\" is " + json_type(j) +
        ", expected an object {\"ranks\": n, \"all_gather\": [[bytes, busbw], ...], ...}");
  const int ranks = field(j, "ranks", 0, file, scope + "."),
            groups = field(j, "groups_per_node", 1, file, scope + ".");
  if (ranks < 2 || groups < 1)
    throw runtime::UsageError("--fabric " + file + ": each scope needs \"ranks\" >= 2");
  for (const auto& [key, rows] : j.items()) {
    if (!rows.is_array()) {
      if (key == "all_gather" || key == "reduce_scatter" || key == "all_reduce")
        throw runtime::UsageError("--fabric " + file + ": field \"" + scope + "." + key + "\" is " +
                                  json_type(rows) +
                                  ", expected an array of [bytes, busbw GB/s] rows");
      continue;
    }
    Points p;
    for (const auto& r : rows) {
      if (!r.is_array() || r.size() != 2 || !r[0].is_number() || !r[1].is_number() ||
          r[0].get<double>() <= 0 || r[1].get<double>() <= 0)
        throw runtime::UsageError("--fabric " + file + ": field \"" + scope + "." + key +
                                  "\" has the row " + r.dump() +
                                  "; rows must be [bytes, busbw GB/s] with both > 0");
      p.emplace_back(r[0].get<double>() * groups, r[1].get<double>() * groups);
    }
    if (!p.empty()) out[op_named(key, file)] = per_rank(p, ranks * groups);
  }
  return out;
}

}  // namespace

HostSpec host_spec(const GpuSpec& gpu) {
  constexpr double kGiB = 1073741824.0;
  // Cores per GPU: vCPUs / 2 (two threads per core) / 8 GPUs. PCIe: H100 and H200 are Gen5 x16,
  // A100 Gen4 x16, at effective pinned-copy figures. DRAM: two EPYC 7R13 (8 channels of
  // DDR4-3200 each) or two Xeon P-8275CL (6 of DDR4-2933). All assumptions: docs/planner.md.
  if (gpu.name == "h100-80gb") return {"p5.48xlarge", 2048 * kGiB, 12, 52, 409.6};
  if (gpu.name == "h200-141gb") return {"p5e.48xlarge", 2048 * kGiB, 12, 52, 409.6};
  if (gpu.name == "a100-80gb") return {"p4de.24xlarge", 1152 * kGiB, 6, 25, 281.6};
  if (gpu.name == "a100-40gb") return {"p4d.24xlarge", 1152 * kGiB, 6, 25, 281.6};
  return {};
}

double BandwidthTable::busbw(double bytes) const {
  if (points.empty()) return 0;
  if (bytes <= points.front().first)
    return points.front().second * bytes / points.front().first;  // latency-bound: constant time
  if (bytes >= points.back().first) return points.back().second;
  const auto hi = std::lower_bound(points.begin(), points.end(), std::make_pair(bytes, 0.0));
  const auto lo = hi - 1;
  const double t = std::log(bytes / lo->first) / std::log(hi->first / lo->first);
  return lo->second + t * (hi->second - lo->second);
}

double Fabric::seconds(comm::Op op, double bytes, int ranks, bool spans_nodes) const {
  if (ranks < 2 || bytes <= 0) return 0;
  const auto& scope = spans_nodes ? inter : intra;
  const auto it = scope.find(op);
  if (it == scope.end())  // a preflight on one node has no inter-node scope, and one rank per node
                          // no intra-node one
    throw runtime::UsageError(
        "--fabric " + name + " has no " + (spans_nodes ? "inter-node " : "intra-node ") +
        comm::op_name(op) +
        " figures; run preflight with the ranks per node and nodes of the plan");
  const double busbw = it->second.busbw(bytes / ranks);  // GB/s
  return latency_s + bytes * comm::bus_factor(op, ranks) / (busbw * 1e9);
}

std::string fabric_gpu_mismatch(const Fabric& fabric, const GpuSpec& gpu) {
  const auto carries = [&](const Fabric& f) {
    return std::find(f.gpus.begin(), f.gpus.end(), gpu.name) != f.gpus.end();
  };
  if (fabric.gpus.empty() || gpu.name == "cpu" || carries(fabric)) return "";
  std::string own, fabric_gpus;  // the published fabric of the GPU's own instances; the GPUs of the
                                 // one asked for
  for (const char* name : {"p5", "p4de"})
    if (carries(published(name))) own = name;
  for (const auto& g : fabric.gpus) fabric_gpus += (fabric_gpus.empty() ? "" : " or ") + g;
  return "--fabric " + fabric.name + " is the network of " + fabric.instances + ", not of --gpu " +
         gpu.name +
         ": this plan pairs its compute and memory with another GPU's NVLink and EFA bandwidth. "
         "--fabric " +
         fabric.name + " goes with --gpu " + fabric_gpus +
         (own.empty() ? "" : ", --gpu " + gpu.name + " with --fabric " + own) +
         " (or pass a `shardtrain preflight --json` file measured on your nodes)";
}

Fabric load_fabric(const std::string& spec) {
  if (spec == "p5" || spec == "p4de") return published(spec);
  std::ifstream in(spec);
  if (!in)
    throw runtime::UsageError("--fabric '" + spec +
                              "' is neither p4de, p5 nor a readable JSON file");
  nlohmann::json j;
  try {
    in >> j;
  } catch (const std::exception&) {
    throw runtime::UsageError("--fabric " + spec +
                              " is not JSON; write it with `shardtrain preflight --json FILE`");
  }
  // Files from before the version field said "shardtrain-fabric/1" in "format" alone.
  const std::string format =
      j.is_object() ? field(j, "format", std::string(), spec) : std::string();
  const bool legacy = format == std::string(kFabricFormat) + "/1";
  if (format != kFabricFormat && !legacy)
    throw runtime::UsageError("--fabric " + spec + " is not a fabric file (\"format\" is '" +
                              format + "', expected '" + kFabricFormat +
                              "'); write it with `shardtrain preflight --json FILE`");
  const int version = legacy ? 1 : field(j, "format_version", 0, spec);
  if (version < 1 || version > kFabricFormatVersion)
    throw runtime::UsageError(
        "--fabric " + spec + " has format_version " + std::to_string(version) +
        "; this shardtrain reads 1 to " + std::to_string(kFabricFormatVersion) +
        ": write it again with this version's `shardtrain preflight --json FILE`");
  if (!j.contains("intra") && !j.contains("inter"))
    throw runtime::UsageError("--fabric " + spec +
                              " needs an \"intra\" or \"inter\" scope (see docs/planner.md)");
  Fabric f;
  f.name = spec;
  f.source = field(j, "source", spec, spec);
  f.overlaps_compute = field(j, "overlaps_compute", true, spec);
  if (j.contains("intra")) f.intra = read_scope(j["intra"], spec, "intra");
  if (j.contains("inter")) f.inter = read_scope(j["inter"], spec, "inter");
  return f;
}

}  // namespace shardtrain::plan
