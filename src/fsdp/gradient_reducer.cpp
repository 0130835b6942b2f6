#include "shardtrain/fsdp/gradient_reducer.h"

#include <ATen/ATen.h>

namespace shardtrain::fsdp {

GradientReducer::GradientReducer(comm::ProcessGroups& groups, at::ScalarType reduce_dtype, GradShard grad_of,
                                 std::function<void()> on_change)
    : groups_(groups), reduce_dtype_(reduce_dtype), grad_of_(std::move(grad_of)), on_change_(std::move(on_change)) {}

void GradientReducer::reduce(int64_t unit, const at::Tensor& full_grad, int64_t shard_numel, bool owned) {
  Pending r;
  r.unit = unit;
  r.send = full_grad.to(reduce_dtype_).contiguous();
  if (groups_.shard->size() == 1) {
    r.shard = r.send;
    r.owned = owned || !r.send.is_same(full_grad);  // a converted copy is ours to keep
  } else {
    r.shard = at::empty({shard_numel}, r.send.options());
    r.work = groups_.shard->reduce_scatter_async(r.send, r.shard);
  }
  pending_.push_back(std::move(r));
  on_change_();
  // Waited on only when needed: before the optimizer, or when more than kMaxPending units'
  // buffers are in flight (the oldest completes first).
  while (pending_.size() > kMaxPending) {
    while (!advance(pending_.front())) {
    }
    pending_.pop_front();
  }
}

bool GradientReducer::advance(Pending& r) {
  if (r.work) {
    r.work->wait();
    r.work.reset();
  }
  if (r.stage == Pending::kScattering && groups_.replicate->size() > 1) {
    r.work = groups_.replicate->all_reduce_async(r.shard);  // hybrid: then across replicas
    r.stage = Pending::kReplicating;
    return false;
  }
  at::Tensor add = r.shard.to(at::kFloat);
  at::Tensor& grad = grad_of_(r.unit);
  if (!grad.defined()) grad = add.is_same(r.shard) && !r.owned ? add.clone() : add;
  else grad.add_(add);
  r.stage = Pending::kDone;
  on_change_();
  return true;
}

void GradientReducer::finish() {
  // Every hybrid all-reduce starts before any is waited on, in the order issued on every rank.
  for (auto& r : pending_)
    if (r.stage == Pending::kScattering) advance(r);
  for (auto& r : pending_)
    while (r.stage != Pending::kDone) advance(r);
  pending_.clear();
}

int64_t GradientReducer::bytes_in_flight() const {
  int64_t b = 0;
  for (const auto& r : pending_) b += r.send.nbytes() + (r.shard.is_same(r.send) ? 0 : r.shard.nbytes());
  return b;
}

}  // namespace shardtrain::fsdp
