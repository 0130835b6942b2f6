#include "shardtrain/ckpt/state_registry.h"

#include <ATen/ATen.h>

#include <set>

#include "shardtrain/runtime/error.h"

namespace shardtrain::ckpt {

int64_t TensorSpec::numel() const {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  return n;
}

Stateful& StateRegistry::add(std::unique_ptr<Stateful> state) {
  for (const auto& s : states_)
    if (s->name() == state->name())
      throw runtime::Error("checkpoint state \"" + state->name() + "\" is registered twice");
  states_.push_back(std::move(state));
  return *states_.back();
}

std::vector<Stateful*> StateRegistry::states() const {
  std::vector<Stateful*> out;
  for (const auto& s : states_) out.push_back(s.get());
  return out;
}

Snapshot StateRegistry::snapshot(bool copy) const {
  Snapshot snap;
  snap.writer = ranks_.writer;
  snap.shard_rank = ranks_.shard_rank;
  std::set<std::string> groups;
  // Host copies, so training may update the live tensors while a thread writes these.
  auto host = [&](const at::Tensor& t) {
    return t.is_cpu() && !copy ? t : t.to(at::kCPU, /*non_blocking=*/false, /*copy=*/true);
  };
  for (const auto& p : states_) {
    for (auto& g : p->tensors()) {
      if (!groups.insert(g.group).second)
        throw runtime::Error("checkpoint state \"" + p->name() + "\" saves tensor group " +
                             g.group + ", which another state saves already");
      for (auto& s : g.slices) s.data = host(s.data);
      snap.groups.push_back(std::move(g));
    }
    Values mine;
    p->save_values(mine);
    snap.values.merge(mine, p->name());
  }
  return snap;
}

}  // namespace shardtrain::ckpt
