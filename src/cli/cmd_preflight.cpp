// shardtrain preflight: run before training (the Slurm script does) to fail fast on a bad node.
// Reports every rank's host and device, NCCL and its net plugin, libfabric's EFA devices (or
// the tcp/shm fallbacks), then sweeps all-gather, reduce-scatter and all-reduce inside a node
// and across nodes, printing algbw/busbw as nccl-tests does, against --min-busbw.
#include <ATen/ATen.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "shardtrain/cli/commands.h"
#include "shardtrain/cli/run_checks.h"
#include "shardtrain/comm/bus_bandwidth.h"
#include "shardtrain/comm/collective_sweep.h"
#include "shardtrain/comm/mpi_communicator.h"
#include "shardtrain/net/fabric_probe.h"
#include "shardtrain/obs/rank_summary.h"
#include "shardtrain/plan/hardware.h"
#include "shardtrain/runtime/counted.h"
#include "shardtrain/runtime/error.h"
#ifdef SHARDTRAIN_HAVE_CUDA
#include "shardtrain/comm/nccl_communicator.h"
#include "shardtrain/cuda/cuda_handles.h"
#endif

namespace shardtrain::cli {
namespace {

using comm::Op;

std::string device_line(bool use_cuda, int device) {
  char buf[192];
#ifdef SHARDTRAIN_HAVE_CUDA
  if (use_cuda) {
    const auto d = cuda::device_info(device);
    std::snprintf(buf, sizeof buf, "GPU %d: %s, %.1f GiB, PCI %s", device, d.name.c_str(),
                  static_cast<double>(d.total_memory) / (1u << 30), d.pci_bus_id.c_str());
    return buf;
  }
#endif
  (void)use_cuda;
  (void)device;
  std::snprintf(buf, sizeof buf, "cpu (%ld cores online)", sysconf(_SC_NPROCESSORS_ONLN));
  return buf;
}

}  // namespace

int cmd_preflight(const std::vector<std::string>& args, runtime::MpiEnv& env) {
  std::string help;
  PreflightOptions o = runtime::parse_on_every_rank([&] { return parse_preflight(args, &help); });
  if (o.common.wants_help()) return print_help(help, env);
  env.set_ranks_per_node(o.ranks_per_node);
  setup_threads(o.common.threads, env);
  const auto& t = env.topology();
  const auto choice = comm::choose_device(o.device, env);
  const bool use_cuda = choice.cuda;
  const int device = choice.index;
  const bool root = env.rank() == 0;

  // What every rank runs on, for the table below and the sweep's slowest-group column.
  const auto hosts = obs::allgather_strings(env.host(), MPI_COMM_WORLD);
  const auto devices = obs::allgather_strings(device_line(use_cuda, device), MPI_COMM_WORLD);
  const auto fabric = net::probe_fabric();
  const auto plugin = net::probe_nccl_net_plugin();
  if (root) {
    std::ostringstream os;
    os << "preflight: " << runtime::counted(t.world, "rank") << " on "
       << runtime::counted(t.num_nodes, "node") << " x " << runtime::counted(t.local_size, "rank")
       << " per node, " << (use_cuda ? "cuda + NCCL" : "cpu + MPI") << "\n";
    for (int r = 0; r < t.world; ++r)
      os << "  rank " << r << "  node " << r / t.local_size << "  " << hosts[r] << "  "
         << devices[r] << "\n";
#ifdef SHARDTRAIN_HAVE_CUDA
    const int v = cuda::nccl_version();
    os << "NCCL " << v / 10000 << "." << (v / 100) % 100 << "." << v % 100 << "; ";
#else
    os << "NCCL: not compiled in (no nvcc/nccl.h at build time); ";
#endif
    os << "net plugin: "
       << (plugin.library.empty() ? "none found (NCCL uses its own IB/socket transport)"
                                  : plugin.library + " (" + plugin.net_name + ")")
       << (plugin.aws_ofi_nccl ? ", aws-ofi-nccl" : "") << "\n";
    os << "libfabric " << fabric.libfabric_version << ": efa ";
    if (fabric.efa_devices > 0) {
      os << fabric.efa_devices << " device(s):";
      for (const auto& d : fabric.efa_domains) os << " " << d;
    } else {
      os << "not found; fallback tcp " << (fabric.has("tcp") ? "yes" : "no") << ", shm "
         << (fabric.has("shm") ? "yes" : "no");
    }
    os << "; providers:";
    for (const auto& p : fabric.providers) os << " " << p;
    os << "\n";
    std::cout << os.str() << std::flush;
  }
  if (!o.sweep) return 0;

  const auto opt = at::TensorOptions()
                       .dtype(at::kFloat)
                       .device(use_cuda ? at::Device(at::kCUDA, device) : at::Device(at::kCPU));
  std::vector<comm::Scope> scopes;
  if (o.intra) scopes.push_back(comm::make_scope("intra-node", t.node, t.local_rank, use_cuda));
  if (o.inter) scopes.push_back(comm::make_scope("inter-node", t.local_rank, t.node, use_cuda));
  std::vector<std::string> failures;
  // The fabric file: per scope its group size, and preflight's inter-node scope runs one group
  // per local rank at once (docs/planner.md turns that into a spanning collective's bandwidth).
  nlohmann::json fabric_json = {{"format", plan::kFabricFormat},
                                {"format_version", plan::kFabricFormatVersion},
                                {"source", "shardtrain preflight on " + hosts[0]},
                                {"ranks_per_node", t.local_size},
                                {"nodes", t.num_nodes},
                                {"overlaps_compute", use_cuda}};  // see plan::Fabric
  for (auto& s : scopes) {
    if (s.comm->size() < 2) {
      if (root)
        std::cout << "# " << s.name << ": skipped, groups of one rank ("
                  << runtime::counted(t.num_nodes, "node") << " x "
                  << runtime::counted(t.local_size, "rank") << " per node)\n";
      continue;
    }
    for (const auto& name : o.ops) {
      const Op op = comm::op_of(name);
      if (root) {
        std::printf("# %s, %s: %s of %d ranks, %s, float32\n", name.c_str(), s.name.c_str(),
                    runtime::counted(t.world / s.comm->size(), "group").c_str(), s.comm->size(),
                    use_cuda ? "nccl" : "mpi");
        std::printf("# %12s %12s %10s %12s %12s %7s  %s\n", "size", "count", "time(us)",
                    "algbw(GB/s)", "busbw(GB/s)", "#wrong", "slowest group");
      }
      double sum = 0;
      int rows = 0;
      int64_t wrong = 0;
      for (int64_t b : comm::sweep_sizes(o.min_bytes, o.max_bytes, o.step_factor)) {
        const comm::SweepRow row = comm::measure(s, op, b, o.warmup, o.iters, opt, use_cuda);
        sum += row.busbw;
        ++rows;
        wrong += row.wrong;
        auto& scope = fabric_json[s.name == "intra-node" ? "intra" : "inter"];
        scope["ranks"] = s.comm->size();
        scope["groups_per_node"] = s.name == "intra-node" ? 1 : t.local_size;
        scope[name].push_back({row.bytes, row.busbw});
        if (root)
          std::printf("  %12lld %12lld %10.1f %12.2f %12.2f %7lld  rank %d (%s)\n",
                      static_cast<long long>(row.bytes), static_cast<long long>(row.count),
                      row.seconds * 1e6, row.algbw, row.busbw, static_cast<long long>(row.wrong),
                      row.slowest_rank, hosts[row.slowest_rank].c_str());
      }
      const double avg = sum / rows;
      const bool ok = wrong == 0 && (o.min_busbw <= 0 || avg >= o.min_busbw);
      if (root)
        std::printf("# avg busbw %.2f GB/s%s\n", avg,
                    o.min_busbw > 0 ? (ok ? ": PASS" : ": FAIL") : "");
      if (!ok) {
        char msg[200];
        std::snprintf(
            msg, sizeof msg, "%s %s: avg busbw %.2f GB/s < --min-busbw %.2f, %lld wrong elements",
            name.c_str(), s.name.c_str(), avg, o.min_busbw, static_cast<long long>(wrong));
        failures.push_back(msg);
      }
    }
  }
  std::fflush(stdout);
  if (root && !o.json.empty()) {
    std::ofstream out(o.json);
    if (!(out << fabric_json.dump(2) << "\n"))
      throw runtime::UsageError("--json " + o.json + " cannot be written; check the directory");
  }
  if (root) {
    if (failures.empty()) std::cout << "preflight: PASS" << std::endl;
    for (const auto& f : failures) std::cout << "preflight: FAIL: " << f << std::endl;
  }
  return failures.empty() ? 0 : 1;
}

}  // namespace shardtrain::cli
