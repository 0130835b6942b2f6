#include "shardtrain/comm/communicator.h"

#include <ATen/ATen.h>

#include "shardtrain/runtime/error.h"

namespace shardtrain::comm {

namespace {
class TrackedWork : public Work {
 public:
  TrackedWork(std::shared_ptr<CollectiveLog> log, int64_t seq, WorkPtr inner, bool probed)
      : log_(std::move(log)), seq_(seq), inner_(std::move(inner)), probed_(probed) {}
  void wait() override {
    if (completed_) {  // seen complete by test(): nothing to block on (a stream-ordered wait still
                       // orders)
      inner_->wait();
      waited_ = true;
      return;
    }
    if (!probed_) log_->waiting(seq_);
    const double t0 = CollectiveLog::now();
    inner_->wait();
    log_->add_wait(CollectiveLog::now() - t0);
    if (!probed_) log_->finished(seq_);
    completed_ = true;
    waited_ = completed_;
  }
  void chain() override {
    inner_->chain();
  }  // another lane follows it: not complete for the caller
  bool test() override {
    if (!completed_ && inner_->test()) {
      completed_ = true;
      if (!probed_) log_->finished(seq_);
    }
    return completed_;
  }
  ~TrackedWork() override {
    inner_.reset();  // a backend's Work never frees buffers in flight: MPI completes, NCCL shelves
                     // them until done
    if (!probed_ && !completed_) log_->finished(seq_);
  }

 private:
  std::shared_ptr<CollectiveLog> log_;
  int64_t seq_;
  WorkPtr inner_;
  bool probed_, waited_ = false, completed_ = false;
};

class CallWork : public Work {  // a blocking host call, run when waited on
 public:
  explicit CallWork(const std::function<void()>& call) : call_(call) {}
  void wait() override { call_(); }
  bool test() override { return false; }  // runs only when waited on

 private:
  const std::function<void()>& call_;
};
}  // namespace

WorkPtr Communicator::tracked(Op op, int64_t bytes, WorkPtr issued, std::function<bool()> done) {
  stats_.add(op, bytes);
  const bool probed = static_cast<bool>(done);
  const int64_t seq = log_->started(op, bytes, std::move(done));
  return std::make_unique<TrackedWork>(log_, seq, std::move(issued), probed);
}

void Communicator::host_collective(Op op, int64_t bytes, const std::function<void()>& call) {
  tracked(op, bytes, std::make_unique<CallWork>(call))->wait();
}

WorkPtr Communicator::send_recv_async(const at::Tensor&, int, const at::Tensor&, int) {
  throw runtime::Error("the " + name_ + " group's backend has no send_recv");
}

WorkPtr Communicator::all_to_all_async(const at::Tensor&, const std::vector<int64_t>&,
                                       const at::Tensor&, const std::vector<int64_t>&) {
  throw runtime::Error("the " + name_ + " group's backend has no all_to_all");
}

void check_all_to_all(const Communicator& c, const at::Tensor& send,
                      const std::vector<int64_t>& send_rows, const at::Tensor& recv,
                      const std::vector<int64_t>& recv_rows) {
  const auto n = static_cast<size_t>(c.size());
  int64_t sent = 0, received = 0;
  for (const int64_t r : send_rows) sent += r;
  for (const int64_t r : recv_rows) received += r;
  if (send_rows.size() != n || recv_rows.size() != n || !send.is_contiguous() ||
      !recv.is_contiguous() || send.scalar_type() != recv.scalar_type() || send.dim() < 1 ||
      recv.dim() != send.dim() || send.size(0) != sent || recv.size(0) != received ||
      send.sizes().slice(1) != recv.sizes().slice(1))
    throw runtime::Error("all_to_all on " + c.name() +
                         ": contiguous buffers of one row shape and dtype, a count per rank");
}

double Communicator::all_reduce_sum(double v) {
  auto t = at::full(
      {1}, v, at::TensorOptions().dtype(at::kDouble).device(device()));  // NCCL: a device tensor
  all_reduce(t);
  return t.item<double>();
}

namespace {
void check_flat(const char* what, const at::Tensor& t) {
  if (!t.is_contiguous()) throw runtime::Error(std::string(what) + ": buffers must be contiguous");
}
}  // namespace

void check_all_gather(const Communicator& c, const at::Tensor& in, const at::Tensor& out) {
  check_flat("all_gather", in);
  check_flat("all_gather", out);
  if (out.numel() != in.numel() * c.size() || in.scalar_type() != out.scalar_type())
    throw runtime::Error("all_gather on " + c.name() +
                         ": output must hold size x input elements of the same dtype");
}

void check_reduce_scatter(const Communicator& c, const at::Tensor& in, const at::Tensor& out) {
  check_flat("reduce_scatter", in);
  check_flat("reduce_scatter", out);
  if (in.numel() != out.numel() * c.size() || in.scalar_type() != out.scalar_type())
    throw runtime::Error("reduce_scatter on " + c.name() +
                         ": input must hold size x output elements of the same dtype");
}

}  // namespace shardtrain::comm
