// What the network stack offers this node, for preflight: libfabric's providers (EFA first,
// then the tcp and shm fallbacks) and the NCCL net plugin NCCL would load (aws-ofi-nccl or not).
#pragma once
#include <string>
#include <vector>

namespace shardtrain::net {

struct FabricReport {
  std::string libfabric_version;         // fi_version(), e.g. "1.17"
  int efa_devices = 0;                   // distinct efa domains offering RDM endpoints
  std::vector<std::string> efa_domains;  // e.g. rdmap16s27-rdm
  std::vector<std::string> providers;    // every provider fi_getinfo lists, deduplicated
  bool has(const std::string& prov) const;
};

// Asks libfabric's fi_getinfo; never throws (a missing provider is a finding, not an error).
FabricReport probe_fabric();

struct NetPluginReport {
  std::string requested;  // NCCL_NET_PLUGIN, or "" for NCCL's default lookup
  std::string library;    // the shared object that loaded, "" when none did
  std::string net_name;   // the plugin's ncclNet_t name, e.g. "Libfabric" (aws-ofi-nccl) or "IB"
  bool aws_ofi_nccl = false;
};

// Loads the plugin the way NCCL looks for it (libnccl-net-<NCCL_NET_PLUGIN>.so, then
// libnccl-net.so) and reads the net name the plugin exports.
NetPluginReport probe_nccl_net_plugin();

}  // namespace shardtrain::net
