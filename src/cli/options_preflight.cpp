// Preflight's options (the description lives with the other commands' in this module).
#include <sstream>

#include "option_parts.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::cli {
using namespace parts;

int64_t parse_bytes(const std::string& s, const char* opt) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string unit = s.substr(used);
  const double mult = unit.empty() || unit == "B" ? 1
                      : unit == "K"               ? 1024.0
                      : unit == "M"               ? 1048576.0
                      : unit == "G"               ? 1073741824.0
                                                  : -1;
  if (used == 0 || mult < 0 || !(v > 0))  // !(v > 0): NaN too
    throw runtime::UsageError(std::string(opt) + " '" + s +
                              "' is not a size; write bytes with an optional K, M or G (e.g. 1M)");
  if (!(v * mult <
        0x1p50))  // 1 PiB; beyond int64 the cast would be undefined (found by fuzz_options)
    throw runtime::UsageError(std::string(opt) + " '" + s +
                              "' is too large; a collective of at most 1 PiB (e.g. 1G)");
  return static_cast<int64_t>(v * mult);
}

namespace {
// parse_bytes' inverse for whole K, M or G: 1048576 -> 1M (--help shows the defaults this way).
std::string bytes_text(int64_t n) {
  for (const auto& [unit, size] :
       {std::pair{"G", int64_t{1} << 30}, std::pair{"M", int64_t{1} << 20},
        std::pair{"K", int64_t{1} << 10}})
    if (n > 0 && n % size == 0) return std::to_string(n / size) + unit;
  return std::to_string(n);
}
}  // namespace

PreflightOptions parse_preflight(const std::vector<std::string>& args, std::string* help_text) {
  PreflightOptions o;
  std::string min_b = bytes_text(o.min_bytes), max_b = bytes_text(o.max_bytes),
              scopes = "intra,inter";
  std::string ops;
  for (const auto& op : o.ops) ops += (ops.empty() ? "" : ",") + op;
  bool no_sweep = false;
  po::options_description d("Preflight");
  d.add_options()("device", po::value(&o.device)->default_value(o.device),
                  "auto, cuda (NCCL) or cpu (MPI)")(
      "min-busbw", real(&o.min_busbw, o.min_busbw),
      "fail when a sweep's average bus bandwidth (GB/s) is below this; 0: report only")(
      "min-bytes", po::value(&min_b)->default_value(min_b),
      "smallest collective size (nccl-tests -b)")("max-bytes",
                                                  po::value(&max_b)->default_value(max_b),
                                                  "largest collective size (nccl-tests -e)")(
      "step-factor", po::value(&o.step_factor)->default_value(o.step_factor),
      "size multiplier between steps (nccl-tests -f)")("iters",
                                                       po::value(&o.iters)->default_value(o.iters),
                                                       "timed iterations per size (nccl-tests -n)")(
      "warmup", po::value(&o.warmup)->default_value(o.warmup),
      "untimed iterations per size (nccl-tests -w)")(
      "ops", po::value(&ops)->default_value(ops),
      "comma-separated: all_gather, reduce_scatter, all_reduce")(
      "scopes", po::value(&scopes)->default_value(scopes),
      "intra (ranks of one node), inter (one rank per node), or both")(
      "json", po::value(&o.json),
      "write the sweep's busbw per size here, as a fabric for `shardtrain plan --fabric FILE`")(
      "no-sweep", po::bool_switch(&no_sweep), "only report hosts, devices, NCCL and libfabric")(
      "ranks-per-node", po::value(&o.ranks_per_node)->default_value(o.ranks_per_node),
      "treat every N consecutive ranks as one node (0: ask MPI)");
  po::options_description all;
  all.add(common_desc(o.common)).add(d);
  parse_into(args, all);
  if (o.common.wants_help()) {
    if (help_text)
      *help_text = usage_text(
          o.common,
          "Usage: shardtrain preflight [--min-busbw GB/s] [options]   (run with mpirun or srun)",
          all);
    return o;
  }
  fsdp::check_device_option(o.device);
  if (o.min_busbw < 0) throw runtime::UsageError("--min-busbw must be >= 0 (GB/s)");
  o.min_bytes = parse_bytes(min_b, "--min-bytes");
  o.max_bytes = parse_bytes(max_b, "--max-bytes");
  if (o.max_bytes < o.min_bytes) throw runtime::UsageError("--max-bytes must be >= --min-bytes");
  if (o.step_factor < 2) throw runtime::UsageError("--step-factor must be 2 or more");
  if (o.iters < 1 || o.warmup < 0)
    throw runtime::UsageError("--iters must be >= 1 and --warmup >= 0");
  if (o.ranks_per_node < 0) throw runtime::UsageError("--ranks-per-node must be >= 0 (0: ask MPI)");
  o.ops.clear();
  std::stringstream ss(ops);
  for (std::string op; std::getline(ss, op, ',');) {
    if (op != "all_gather" && op != "reduce_scatter" && op != "all_reduce")
      throw runtime::UsageError("--ops: unknown collective '" + op +
                                "'; use all_gather, reduce_scatter, all_reduce");
    o.ops.push_back(op);
  }
  if (scopes != "intra" && scopes != "inter" && scopes != "intra,inter" && scopes != "inter,intra")
    throw runtime::UsageError("--scopes must be intra, inter or intra,inter");
  o.intra = scopes.find("intra") != std::string::npos;
  o.inter = scopes.find("inter") != std::string::npos;
  o.sweep = !no_sweep;
  check_threads(o.common);
  return o;
}

}  // namespace shardtrain::cli
