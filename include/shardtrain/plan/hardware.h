// What the planner knows of the hardware: GPUs (peak, memory, memory bandwidth) and fabrics
// (bus bandwidth per collective and size, inside a node and across nodes). Published figures
// with their sources are in docs/planner.md; a fabric can also come from `preflight --json`.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "shardtrain/comm/communicator.h"
#include "shardtrain/hw/accelerators.h"

namespace shardtrain::plan {

// The fabric file `shardtrain preflight --json` writes and `plan --fabric` reads: its "format"
// and "format_version" fields. A file of another format or a newer version is refused.
inline constexpr const char* kFabricFormat = "shardtrain-fabric";
inline constexpr int kFabricFormatVersion = 1;

// GPUs: the one table in hw/accelerators.h, which MFU reads too.
using hw::gpu_names;
using hw::gpu_spec;
using hw::GpuSpec;

// busbw (GB/s) by collective size in bytes, as nccl-tests prints it; interpolated in log size.
struct BandwidthTable {
  std::vector<std::pair<double, double>> points;  // (bytes, busbw GB/s), sorted by bytes
  double busbw(double bytes) const;
};

struct Fabric {
  std::string name, source;
  // "intra": a collective among the ranks of one node; "inter": one spanning nodes, every rank
  // of each node taking part (nccl-tests across nodes).
  std::map<comm::Op, BandwidthTable> intra, inter;
  // Published fabrics: the instances they belong to and the --gpu names those carry; empty for a
  // file.
  std::string instances;
  std::vector<std::string> gpus;
  double latency_s = 0;  // per collective call
  // NCCL runs collectives on their own streams beside the compute; Open MPI on CPU progresses a
  // non-blocking collective only inside MPI calls, so the engine's waits expose all of it.
  bool overlaps_compute = true;
  // Seconds for one collective of `bytes` (the unsharded buffer) over `ranks` ranks.
  double seconds(comm::Op op, double bytes, int ranks, bool spans_nodes) const;
};
// The host a GPU kind comes in, for --cpu-offload: its AWS instance's memory per node, physical
// cores per GPU and DRAM bandwidth per node, and the GPU's effective pinned host<->device copy
// bandwidth over PCIe. Published figures and the assumptions made of them: docs/planner.md.
struct HostSpec {
  std::string instance;     // "p5.48xlarge"; empty where unknown (--gpu cpu)
  double memory_bytes = 0;  // per node; 0: unknown, not checked
  int cores_per_gpu = 0;    // the share of one rank; 0: unknown, one core
  double pcie_gbps = 0;     // each direction, GB/s; 0: no copy (a CPU device is the host)
  double dram_gbps = 0;     // per node, the sockets' channels at their rated speed; 0: unknown
};
HostSpec host_spec(const GpuSpec& gpu);

// p4de, p5 (published), or a file: a fabric JSON (configs/fabric/*.json) or `preflight --json`'s.
// Throws UsageError naming --fabric when it is neither.
Fabric load_fabric(const std::string& spec);
// A published fabric with a GPU its instances do not carry (p5 with an A100): a one-line warning
// naming both and what goes with what; empty when they go together or the fabric is a file.
std::string fabric_gpu_mismatch(const Fabric& fabric, const GpuSpec& gpu);

}  // namespace shardtrain::plan
