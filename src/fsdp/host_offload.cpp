#include "shardtrain/fsdp/host_offload.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "shardtrain/fsdp/host_memory.h"
#include "shardtrain/runtime/error.h"
#ifdef SHARDTRAIN_HAVE_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace shardtrain::fsdp {

#ifdef SHARDTRAIN_HAVE_CUDA
struct HostOffload::Copies {
  c10::cuda::CUDAStream stream;
  std::vector<at::cuda::CUDAEvent> done;  // [units] recorded after each unit's copy
  Copies(at::Device device, size_t units)
      : stream(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index())),
        done(units) {}
};
#else
struct HostOffload::Copies {};
#endif

void HostOffload::select_device(at::Device device) {
#ifdef SHARDTRAIN_HAVE_CUDA
  if (device.is_cuda()) c10::cuda::set_device(device.index());
#endif
  (void)device;
}

HostOffload::HostOffload(at::Device device, std::vector<FlatUnit*> units, ThreadStart start)
    : device_(device),
      units_(std::move(units)),
      in_flight_(units_.size()),
      armed_(units_.size()),
      staging_(units_.size()),
      fresh_(units_.size(), true),
      outstanding_(units_.size(), 0),
      start_(std::move(start)) {
#ifdef SHARDTRAIN_HAVE_CUDA
  if (device_.is_cuda()) copies_ = std::make_unique<Copies>(device_, units_.size());
#endif
  worker_ = std::thread([this] { work(); });
}

HostOffload::~HostOffload() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void HostOffload::start_step() { std::fill(fresh_.begin(), fresh_.end(), true); }

void HostOffload::copy(int64_t u, const at::Tensor& grad, at::Tensor& host) {
#ifdef SHARDTRAIN_HAVE_CUDA
  if (copies_) {
    release_copied(/*wait=*/false);  // device memory back from the copies already done
    if (in_flight_[u].defined()) copies_->done[u].synchronize();  // u's previous micro-batch
    at::cuda::CUDAEvent reduced;
    reduced.record(c10::cuda::getCurrentCUDAStream(device_.index()));
    reduced.block(copies_->stream);
    {
      const c10::cuda::CUDAStreamGuard on_copies(copies_->stream);
      host.copy_(grad, /*non_blocking=*/true);
    }
    copies_->done[u].record(copies_->stream);
    in_flight_[u] = grad;  // kept alive until its copy is done
    return;
  }
#endif
  (void)u;
  host.copy_(grad);  // the CPU "device": a copy all the same, into its own buffer
}

void HostOffload::wait_copied(int64_t u) {
#ifdef SHARDTRAIN_HAVE_CUDA
  if (copies_) copies_->done[u].synchronize();  // this thread waits; the streams go on
#endif
  (void)u;
}

void HostOffload::grad_to_host(int64_t u, bool last) {
  FlatUnit& unit = *units_[u];
  at::Tensor& grad = unit.grad();
  if (grad.defined()) {
    const bool first = fresh_[u];
    fresh_[u] = false;
    if (first) {
      copy(u, grad, unit.host_grad());
    } else {
      if (!staging_[u].defined())
        staging_[u] = host_tensor(unit.host_grad().numel(), at::kFloat, device_.is_cuda());
      wait_stepped(u);  // the host thread has added the staging buffer's last contents
      copy(u, grad, staging_[u]);
      run(
          u,
          [this, u] {
            wait_copied(u);
            units_[u]->host_grad().add_(staging_[u]);
          },
          /*refresh=*/false);
    }
    grad = at::Tensor();
  }
  if (last) run_armed(u);
}

void HostOffload::arm(int64_t u, std::function<void()> job) { armed_[u].push_back(std::move(job)); }

void HostOffload::run_armed(int64_t u) {
  for (auto& job : armed_[u]) {
    run(u, [this, u, job = std::move(job)] {
      wait_copied(u);
      job();
    });
  }
  armed_[u].clear();
}

void HostOffload::release_copied(bool wait) {
#ifdef SHARDTRAIN_HAVE_CUDA
  for (size_t u = 0; u < in_flight_.size(); ++u) {
    if (!in_flight_[u].defined()) continue;
    if (wait)
      copies_->done[u].synchronize();
    else if (!copies_->done[u].query())
      continue;
    in_flight_[u] = at::Tensor();
  }
#endif
  (void)wait;
}

void HostOffload::wait_grads() {
  release_copied(/*wait=*/true);
  for (size_t u = 0; u < armed_.size(); ++u)
    run_armed(static_cast<int64_t>(u));  // a unit whose gradient never came: its step all the same
  settle();                              // the later micro-batches' additions (and armed steps)
}

size_t HostOffload::armed_jobs() const {
  size_t n = 0;
  for (const auto& jobs : armed_) n += jobs.size();
  return n;
}

int64_t HostOffload::device_bytes() const {
  int64_t b = 0;
  for (const auto& t : in_flight_)
    if (t.defined()) b += static_cast<int64_t>(t.nbytes());
  return b;
}

void HostOffload::run(int64_t u, std::function<void()> job, bool refresh) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++outstanding_[u];
    jobs_.push_back({u, std::move(job), refresh});
  }
  cv_.notify_all();
}

void HostOffload::work() {
  try {
    if (start_) start_(device_);  // before any CUDA call on this thread
  } catch (...) {                 // the steps' waits report it; the thread goes on taking jobs
    std::lock_guard<std::mutex> lock(mu_);
    error_ = std::current_exception();
  }
  at::init_num_threads();  // this thread's intra-op threads: the rank's (at::set_num_threads)
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    std::exception_ptr error;
    try {
      job.fn();
      if (job.refresh && units_[job.unit]) units_[job.unit]->refresh_mirror(/*force=*/true);
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (error && !error_) error_ = error;
      --outstanding_[job.unit];
    }
    cv_.notify_all();
  }
}

void HostOffload::rethrow() {
  if (error_) std::rethrow_exception(error_);
}

void HostOffload::wait_stepped(int64_t u) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this, u] { return outstanding_[u] == 0 || error_; });
  rethrow();
}

void HostOffload::settle() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] {
    if (error_) return true;
    for (int n : outstanding_)
      if (n > 0) return false;
    return true;
  });
  rethrow();
}

}  // namespace shardtrain::fsdp
