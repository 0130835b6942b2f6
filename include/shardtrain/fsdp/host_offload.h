// --cpu-offload at run time. Each trainable unit keeps its fp32 master, AdamW's moments and its
// gradient shard in host memory (FlatUnit::offload_to_host). Here: each reduced gradient shard
// goes to the host as soon as it has landed (beside a GPU, on a copy stream of its own while the
// backward pass goes on) and is freed on the device; micro-batches after a step's first add up on
// the host, as FSDP2's offload does. The optimizer's steps run on one host thread, unit by unit in
// the order given, while the device computes; a unit is gathered again only once its steps are
// done and its mirror is refreshed.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "shardtrain/fsdp/flat_unit.h"

namespace shardtrain::fsdp {

class HostOffload {
 public:
  // The host thread's first act, before any job: select_device makes the rank's GPU current, so
  // the thread's first CUDA call creates no context on GPU 0 (as the NCCL watchdog does).
  using ThreadStart = std::function<void(at::Device)>;
  static void select_device(at::Device device);
  // units: [units] the trainable flat unit of each (offloaded ones), nullptr where none trains.
  HostOffload(at::Device device, std::vector<FlatUnit*> units, ThreadStart start = select_device);
  HostOffload(const HostOffload&) = delete;
  HostOffload& operator=(const HostOffload&) = delete;
  ~HostOffload();  // the steps already given run to their end

  void start_step();  // the next gradient of each unit is the step's first
  // Unit u's device gradient shard (FlatUnit::grad()) into its host gradient (the step's first) or
  // added to it (a later micro-batch's: copied to a host staging buffer, added on the host
  // thread); the device shard is released once copied. Nothing on the compute stream waits for
  // it. last: the step's last for u, so u's armed step may run.
  void grad_to_host(int64_t u, bool last);
  // Every gradient is in host memory, added up, and every host job given is done.
  void wait_grads();
  // Runs job on the host thread after the jobs given before it, then (refresh) u's mirror.
  void run(int64_t u, std::function<void()> job, bool refresh = true);
  // Runs job on the host thread once u's gradient is in host memory (grad_to_host, or at the
  // latest wait_grads), then refreshes u's mirror: a step that needs no other unit's gradients.
  void arm(int64_t u, std::function<void()> job);
  void wait_stepped(int64_t u);  // u's jobs are done; rethrows a job's error
  void settle();                 // every job is done; rethrows a job's error
  int64_t device_bytes() const;  // device gradient shards whose copy is still in flight
  size_t armed_jobs() const;     // armed jobs still waiting for their unit's gradient

 private:
  struct Job {
    int64_t unit = 0;
    std::function<void()> fn;
    bool refresh = true;  // a step of u's master: its mirror follows
  };
  struct Copies;  // the copy stream and its events (CUDA)
  void work();
  void release_copied(bool wait);
  void run_armed(int64_t u);                                       // u's armed jobs, after its copy
  void copy(int64_t u, const at::Tensor& grad, at::Tensor& host);  // device to host, async
  void wait_copied(int64_t u);  // on the host thread: u's latest copy is done
  void rethrow();

  at::Device device_;
  std::vector<FlatUnit*> units_;
  std::unique_ptr<Copies> copies_;
  std::vector<at::Tensor> in_flight_;  // [units] device gradient shards being copied
  std::vector<std::vector<std::function<void()>>> armed_;  // [units] waiting for the gradient
  std::vector<at::Tensor> staging_;  // [units] a later micro-batch's gradient on the host
  std::vector<bool> fresh_;          // [units] the next gradient is the step's first
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  std::vector<int> outstanding_;  // [units] jobs given and not done
  std::exception_ptr error_;
  bool stop_ = false;
  ThreadStart start_;
  std::thread worker_;  // last: started once the rest exists
};

}  // namespace shardtrain::fsdp
