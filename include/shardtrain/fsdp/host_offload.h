// --cpu-offload at run time. Each trainable unit keeps its fp32 master, AdamW's moments and its
// gradient shard in host memory (FlatUnit::offload_to_host). Here: a unit's reduced gradient shard
// goes to the host as soon as its last reduction of the step has landed (beside a GPU, on a copy
// stream of its own while the backward pass goes on), and the optimizer's steps run on one host
// thread, unit by unit in the order given, while the device computes; a unit is gathered again
// only once its steps are done and its mirror is refreshed.
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
  // units: [units] the trainable flat unit of each (offloaded ones), nullptr where none trains.
  HostOffload(at::Device device, std::vector<FlatUnit*> units);
  HostOffload(const HostOffload&) = delete;
  HostOffload& operator=(const HostOffload&) = delete;
  ~HostOffload();  // the steps already given run to their end

  // Unit u's device gradient shard (FlatUnit::grad()) into its host gradient; the device shard is
  // released once the copy is done. Nothing on the compute stream waits for it.
  void grad_to_host(int64_t u);
  void wait_grads();  // every copy issued is in host memory (the host waits, the device does not)
  // Runs job on the host thread after the jobs given before it, then refreshes u's mirror.
  void run(int64_t u, std::function<void()> job);
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
  };
  struct Copies;  // the copy stream and its events (CUDA)
  void work();
  void release_copied(bool wait);
  void run_armed(int64_t u);  // u's armed jobs, after its copy
  void rethrow();

  at::Device device_;
  std::vector<FlatUnit*> units_;
  std::unique_ptr<Copies> copies_;
  std::vector<at::Tensor> in_flight_;  // [units] device gradient shards being copied
  std::vector<std::vector<std::function<void()>>> armed_;  // [units] waiting for the gradient
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  std::vector<int> outstanding_;  // [units] jobs given and not done
  std::exception_ptr error_;
  bool stop_ = false;
  std::thread worker_;  // last: started once the rest exists
};

}  // namespace shardtrain::fsdp
