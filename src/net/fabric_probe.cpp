#include "shardtrain/net/fabric_probe.h"

#include <dlfcn.h>
#include <rdma/fabric.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace shardtrain::net {

bool FabricReport::has(const std::string& prov) const {
  return std::find(providers.begin(), providers.end(), prov) != providers.end();
}

namespace {
// libfabric, loaded when preflight asks: linking it would load its PSM providers in every
// process, and each calibrates its clock at load (0.2 s of sleeping at every start).
struct Fabric {
  void* lib = dlopen("libfabric.so.1", RTLD_NOW | RTLD_LOCAL);
  Fabric() = default;
  Fabric(const Fabric&) = delete;
  Fabric& operator=(const Fabric&) = delete;
  ~Fabric() {
    if (lib) dlclose(lib);
  }
  template <class F>
  F* fn(const char* name) const {
    return lib ? reinterpret_cast<F*>(dlsym(lib, name)) : nullptr;
  }
  decltype(fi_version)* version = fn<decltype(fi_version)>("fi_version");
  decltype(fi_getinfo)* getinfo = fn<decltype(fi_getinfo)>("fi_getinfo");
  decltype(fi_freeinfo)* freeinfo = fn<decltype(fi_freeinfo)>("fi_freeinfo");
  decltype(fi_dupinfo)* dupinfo = fn<decltype(fi_dupinfo)>("fi_dupinfo");
  bool ok() const { return version && getinfo && freeinfo && dupinfo; }
};

// Every fi_info libfabric returns for `prov` ("" for all providers); the caller frees it.
fi_info* getinfo(const Fabric& f, const char* prov) {
  fi_info* hints = f.dupinfo(nullptr);  // fi_allocinfo()
  if (!hints) return nullptr;
  hints->ep_attr->type = FI_EP_RDM;  // the endpoint type aws-ofi-nccl uses
  if (prov) hints->fabric_attr->prov_name = strdup(prov);
  fi_info* info = nullptr;
  const int rc = f.getinfo(FI_VERSION(1, 9), nullptr, nullptr, 0, hints, &info);
  f.freeinfo(hints);
  return rc == 0 ? info : nullptr;
}

void add_unique(std::vector<std::string>& v, const std::string& s) {
  if (std::find(v.begin(), v.end(), s) == v.end()) v.push_back(s);
}
}  // namespace

FabricReport probe_fabric() {
  FabricReport r;
  const Fabric f;
  if (!f.ok()) {
    r.libfabric_version = "not loadable (libfabric.so.1)";
    return r;
  }
  const uint32_t v = f.version();
  r.libfabric_version = std::to_string(FI_MAJOR(v)) + "." + std::to_string(FI_MINOR(v));
  if (fi_info* efa = getinfo(f, "efa")) {
    for (fi_info* i = efa; i; i = i->next)
      if (i->domain_attr && i->domain_attr->name) add_unique(r.efa_domains, i->domain_attr->name);
    f.freeinfo(efa);
  }
  r.efa_devices = static_cast<int>(r.efa_domains.size());
  if (fi_info* all = getinfo(f, nullptr)) {
    for (fi_info* i = all; i; i = i->next)
      if (i->fabric_attr && i->fabric_attr->prov_name) {
        std::string name = i->fabric_attr->prov_name;  // layered providers read "tcp;ofi_rxm"
        add_unique(r.providers, name.substr(0, name.find(';')));
      }
    f.freeinfo(all);
  }
  return r;
}

NetPluginReport probe_nccl_net_plugin() {
  NetPluginReport r;
  if (const char* p = std::getenv("NCCL_NET_PLUGIN")) r.requested = p;
  std::vector<std::string> names;
  if (!r.requested.empty() && r.requested != "none") {
    names.push_back(r.requested);  // NCCL accepts a full library name or a suffix
    names.push_back("libnccl-net-" + r.requested + ".so");
  }
  if (r.requested != "none") {
    names.push_back("libnccl-net.so");
    names.push_back("libnccl-net-ofi.so");
  }
  for (const auto& n : names) {
    void* h = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) continue;
    r.library = n;
    // Every ncclNet_vN_t starts with `const char* name`; newest version first.
    for (int ver = 10; ver >= 2 && r.net_name.empty(); --ver) {
      auto* sym = dlsym(h, ("ncclNetPlugin_v" + std::to_string(ver)).c_str());
      if (sym) r.net_name = *static_cast<const char* const*>(sym);
    }
    Dl_info info{};
    if (void* any = dlsym(h, "ncclNetPlugin_v6"); any && dladdr(any, &info) && info.dli_fname)
      r.library = info.dli_fname;
    break;  // NCCL keeps the first plugin that loads
  }
  r.aws_ofi_nccl = r.net_name.find("Libfabric") != std::string::npos ||
                   r.net_name.find("AWS") != std::string::npos;
  return r;
}

}  // namespace shardtrain::net
