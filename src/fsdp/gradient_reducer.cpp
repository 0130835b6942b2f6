#include "shardtrain/fsdp/gradient_reducer.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <numeric>

namespace shardtrain::fsdp {

int64_t scatter_bytes(int64_t padded, int64_t shard_numel, int shard_size, int reduce_elt) {
  return padded * reduce_elt + (shard_size > 1 ? shard_numel * reduce_elt : 0);
}

size_t reductions_to_complete(const std::vector<int64_t>& in_flight, int64_t incoming,
                              int64_t budget) {
  int64_t total = std::accumulate(in_flight.begin(), in_flight.end(), incoming);
  size_t n = 0;
  while (n < in_flight.size() && total > budget) {
    total -= in_flight[n];
    ++n;
  }
  return n;
}

GradientReducer::GradientReducer(comm::ParallelDims& groups, at::ScalarType reduce_dtype,
                                 GradShard grad_of, std::function<void()> on_change)
    : groups_(groups),
      reduce_dtype_(reduce_dtype),
      grad_of_(std::move(grad_of)),
      on_change_(std::move(on_change)) {}

bool GradientReducer::hybrid() const { return groups_.replicate->size() > 1; }

int64_t GradientReducer::held(const Pending& r) const {
  const bool separate_send = r.send.defined() && !r.send.is_same(r.shard);
  return (separate_send ? static_cast<int64_t>(r.send.nbytes()) : 0) +
         (r.shard.defined() ? static_cast<int64_t>(r.shard.nbytes()) : 0);
}

void GradientReducer::reduce(int64_t unit, const at::Tensor& full_grad, int64_t shard_numel,
                             bool owned, bool last, comm::Communicator* shard) {
  progress();
  comm::Communicator& group = shard ? *shard : *groups_.shard;
  const int shard_size = group.size();
  const int elt = static_cast<int>(c10::elementSize(reduce_dtype_));
  // Every reduction not yet added holds buffers: its reduce-scatter's, or (hybrid) its
  // all-reduce's.
  std::vector<int64_t> in_flight;
  for (const Pending& r : pending_) in_flight.push_back(held(r));
  const size_t n = reductions_to_complete(
      in_flight, scatter_bytes(full_grad.numel(), shard_numel, shard_size, elt), budget_);
  for (size_t k = 0; k < n; ++k) complete_oldest();
  progress();
  Pending r;
  r.unit = unit;
  r.last = last;
  if (full_grad.scalar_type() == reduce_dtype_ && full_grad.is_contiguous()) {
    r.send = full_grad;
  } else {
    r.reused_send = true;
    auto spare = std::find_if(spare_.begin(), spare_.end(),
                              [&](const at::Tensor& t) { return t.numel() == full_grad.numel(); });
    r.send =
        spare != spare_.end() ? spare->copy_(full_grad) : full_grad.to(reduce_dtype_).contiguous();
  }
  spare_.clear();  // not hoarded: a buffer not reused now is freed
  if (shard_size == 1) {
    r.shard = r.send;
    r.owned = owned || r.reused_send;  // a converted copy is ours to keep
  } else {
    r.shard = at::empty({shard_numel}, r.send.options());
    r.scatter = group.reduce_scatter_async(r.send, r.shard);
    if (hybrid()) r.replicate = groups_.replicate->all_reduce_after_async(r.shard, *r.scatter);
  }
  pending_.push_back(std::move(r));
  progress();  // one without a reduce-scatter (a group of one) starts its all-reduce in turn
  on_change_();
}

void GradientReducer::scattered(Pending& r) {
  r.done_scatter = true;
  r.scatter.reset();
  if (r.reused_send && !r.send.is_same(r.shard)) spare_.push_back(r.send);
  r.send = at::Tensor();
  if (hybrid() && !r.replicate)
    r.replicate = groups_.replicate->all_reduce_async(r.shard);  // in issue order: see progress()
}

void GradientReducer::complete_scatter(Pending& r) {
  r.scatter->wait();  // NCCL: the current stream waits on the device; MPI: the host blocks
  scattered(r);
  on_change_();
}

void GradientReducer::complete_oldest() {
  Pending& r = pending_.front();
  if (r.scatter)
    complete_scatter(r);  // starts its all-reduce where none is chained (MPI): all older ones have
  else if (!r.done_scatter)
    scattered(r);  // a group of one: nothing to scatter
  add(r);
  pending_.pop_front();
}

void GradientReducer::progress() {
  // All-reduces start in issue order on every rank: stop at the first reduce-scatter still running.
  for (Pending& r : pending_) {
    if (r.done_scatter) continue;
    if (r.scatter && !r.scatter->test()) break;
    scattered(r);
    on_change_();
  }
  while (!pending_.empty() && pending_.front().done_scatter &&
         (!pending_.front().replicate || pending_.front().replicate->test())) {
    add(pending_.front());
    pending_.pop_front();
  }
}

void GradientReducer::add(Pending& r) {
  if (r.replicate)
    r.replicate->wait();  // the gradients are consumed here: the compute stream waits now
  r.replicate.reset();
  at::Tensor a = r.shard.to(at::kFloat);
  at::Tensor& grad = grad_of_(r.unit);
  if (!grad.defined())
    grad = a.is_same(r.shard) && !r.owned ? a.clone() : a;
  else
    grad.add_(a);
  r.shard = at::Tensor();
  on_change_();
  if (on_added_) on_added_(r.unit, r.last);
}

void GradientReducer::finish() {
  // Every hybrid all-reduce starts before any is waited on, in the order issued on every rank.
  for (auto& r : pending_)
    if (r.scatter)
      complete_scatter(r);
    else if (!r.done_scatter)
      scattered(r);
  for (auto& r : pending_) add(r);
  pending_.clear();
  spare_.clear();
  on_change_();
}

int64_t GradientReducer::bytes_in_flight() const {
  int64_t b = 0;
  for (const auto& r : pending_) b += held(r);
  for (const auto& t : spare_) b += static_cast<int64_t>(t.nbytes());
  return b;
}

}  // namespace shardtrain::fsdp
