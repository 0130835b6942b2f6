// AdamW on fp32 master weights with decoupled weight decay, through the same fused kernel as
// torch.optim.AdamW(fused=True) (CPU and CUDA). Works on whole tensors or on shards.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace shardtrain::optim {

struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;  // decoupled; not on norm weights
  void validate() const;  // throws UsageError naming --beta1/--beta2, --adam-eps or --weight-decay
};

struct AdamWSlot {
  at::Tensor param;       // fp32, updated in place
  at::Tensor exp_avg;     // same shape as param
  at::Tensor exp_avg_sq;  // same shape as param
  bool decay = true;      // false for RMSNorm weights
};

class AdamW {
 public:
  explicit AdamW(AdamWConfig cfg) : cfg_(cfg) {}
  void add(const at::Tensor& param, bool decay);
  // grads[i] belongs to slots()[i]; an undefined grad skips that slot. skip: a float scalar on
  // the device, 1 leaves everything (the step count too) as it was (GradScaler's found_inf).
  // grad_scale: a float scalar on the device that the kernel divides each gradient by as it reads
  // it (clipping folded in: clip_divisor), instead of a separate pass over the gradients.
  void step(double lr, const std::vector<at::Tensor>& grads, const at::Tensor& skip = {},
            const at::Tensor& grad_scale = {});
  // step() in three parts, for a caller that steps groups of slots apart (on another thread):
  // begin_step counts the step and returns the found_inf the kernels read (undefined: no skip);
  // step_slots steps slots [first, last) with grads[i - first]; end_step uncounts a skipped step,
  // after every group.
  at::Tensor begin_step(const at::Tensor& skip);
  void step_slots(double lr, const std::vector<at::Tensor>& grads, size_t first, size_t last,
                  const at::Tensor& found_inf, const at::Tensor& grad_scale = {});
  void end_step(const at::Tensor& found_inf);
  int64_t step_count() const;  // the steps taken: a host read of the device's count
  void set_step_count(int64_t s);
  std::vector<AdamWSlot>& slots() { return slots_; }
  const AdamWConfig& config() const { return cfg_; }

 private:
  AdamWConfig cfg_;
  std::vector<AdamWSlot> slots_;
  int64_t step_ = 0;  // until the first step makes step_t_
  at::Tensor
      step_t_;  // scalar fp32 on the parameters' device: the fused kernel's step, counted there
};

// Squared L2 norm of all grads: fp32 per-tensor norms, summed in fp64 so shards can be summed
// across ranks. A 0-d fp64 tensor on the grads' device (on `device` when there are none): no host
// read.
at::Tensor grad_sq_norm(const std::vector<at::Tensor>& grads, const at::Device& device);
// torch.nn.utils.clip_grad_norm_'s rule, on the device: scale by min(1, max_norm / (norm + 1e-6)).
void scale_grads(const std::vector<at::Tensor>& grads, const at::Tensor& total_norm,
                 double max_norm);
// The same rule as a divisor for AdamW::step's grad_scale: max(1, (norm + 1e-6) / max_norm), fp32
// on `device`. Dividing by it may differ from scale_grads' multiply by one fp32 ulp.
at::Tensor clip_divisor(const at::Tensor& total_norm, double max_norm, const at::Device& device);

}  // namespace shardtrain::optim
