// The gradient reducer on a GPU against collectives that run late on their own streams. One GPU
// is one NCCL rank, so the groups here are loopbacks: each runs on its own CUDA stream behind a
// spin kernel and produces what ranks holding the same data would (a reduce-scatter gives n x the
// rank's chunk, an all-reduce n x). HYBRID_SHARD's gradients must equal NO_SHARD's on the same
// data bit for bit (both are products by powers of two); a send buffer reused for the next unit
// before its late reduce-scatter ran would change them. Skipped, with the reason, without a GPU.
#include <gtest/gtest.h>

#include "gpu_skip.h"
#ifdef SHARDTRAIN_TORCH_CUDA
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <functional>
#include <memory>
#include <vector>

#include "shardtrain/comm/communicator.h"
#include "shardtrain/comm/parallel_dims.h"
#include "shardtrain/cuda/cuda_handles.h"
#include "shardtrain/fsdp/gradient_reducer.h"
#endif

using namespace shardtrain;

#ifdef SHARDTRAIN_TORCH_CUDA
namespace {

class LoopWork : public comm::Work {
 public:
  explicit LoopWork(std::shared_ptr<at::cuda::CUDAEvent> done) : done_(std::move(done)) {}
  void wait() override { done_->block(c10::cuda::getCurrentCUDAStream()); }
  bool test() override { return done_->query(); }
  void chain() override { done_->block(c10::cuda::getCurrentCUDAStream()); }

 private:
  std::shared_ptr<at::cuda::CUDAEvent> done_;
};

class LoopGroup : public comm::Communicator {
 public:
  LoopGroup(int n, int64_t spin_cycles)
      : Communicator("loop"), n_(n), spin_(spin_cycles), stream_(c10::cuda::getStreamFromPool()) {}
  int rank() const override { return 0; }
  int size() const override { return n_; }
  comm::WorkPtr all_gather_async(const at::Tensor&, const at::Tensor&) override { return nullptr; }
  comm::WorkPtr broadcast_async(const at::Tensor&, int) override { return nullptr; }
  void barrier() override {}
  MPI_Comm mpi() const override { return MPI_COMM_NULL; }
  at::Device device() const override { return at::Device(at::kCUDA, 0); }

  comm::WorkPtr reduce_scatter_async(const at::Tensor& in, const at::Tensor& out) override {
    const double n = n_;
    return issue(
        comm::Op::kReduceScatter, {in, out},
        [in, out, n] { out.copy_(in.narrow(0, 0, out.numel()) * n); }, true);
  }
  comm::WorkPtr all_reduce_async(const at::Tensor& t) override {
    const double n = n_;
    return issue(
        comm::Op::kAllReduce, {t}, [t, n] { t.mul_(n); }, true);
  }
  comm::WorkPtr all_reduce_after_async(const at::Tensor& t, comm::Work& prior) override {
    {
      const c10::cuda::CUDAStreamGuard on_lane(
          stream_);  // as NCCL's lane: this stream waits for prior
      prior.chain();
    }
    const double n = n_;
    return issue(
        comm::Op::kAllReduce, {t}, [t, n] { t.mul_(n); }, false);
  }

 private:
  comm::WorkPtr issue(comm::Op op, std::vector<at::Tensor> buffers,
                      const std::function<void()>& run, bool after_caller) {
    if (after_caller) {  // the producer first, as NCCL's lanes wait for the caller's stream
      at::cuda::CUDAEvent produced;
      produced.record(c10::cuda::getCurrentCUDAStream());
      produced.block(stream_);
    }
    {
      const c10::cuda::CUDAStreamGuard on_lane(stream_);
      at::cuda::sleep(spin_);  // late: the compute stream runs ahead
      run();
    }
    auto done = std::make_shared<at::cuda::CUDAEvent>();
    done->record(stream_);
    const int64_t bytes = static_cast<int64_t>(buffers.front().nbytes());
    for (auto& b : buffers)
      keep_.push_back(std::move(b));  // never freed to the allocator while in flight
    return tracked(op, bytes, std::make_unique<LoopWork>(done), [done] { return done->query(); });
  }
  int n_;
  int64_t spin_;
  c10::cuda::CUDAStream stream_;
  std::vector<at::Tensor> keep_;
};

comm::ParallelDims loop_groups(int shard, int replicate, int64_t spin) {
  comm::ParallelDims g;
  g.layout.shard_size = shard;
  g.layout.replicate_size = replicate;
  g.world = std::make_unique<LoopGroup>(shard * replicate, spin);
  g.shard = std::make_unique<LoopGroup>(shard, spin);
  g.replicate = std::make_unique<LoopGroup>(replicate, spin);
  return g;
}

// Each unit's reduced gradient, bf16 gradients reduced in fp32 (converted send buffers, reused).
std::vector<at::Tensor> reduce_units(int shard, int replicate, int64_t budget, int64_t units,
                                     int64_t padded) {
  auto groups = loop_groups(shard, replicate, int64_t{1} << 24);  // ~10 ms per collective
  std::vector<at::Tensor> grads(units);
  fsdp::GradientReducer reducer(
      groups, at::kFloat, [&grads](int64_t u) -> at::Tensor& { return grads[u]; }, [] {});
  reducer.set_budget(budget);
  const auto opts = at::TensorOptions().dtype(at::kFloat).device(at::kCUDA, 0);
  for (int64_t u = 0; u < units; ++u) {
    const auto g =
        (at::arange(padded, opts) * 0.25 + static_cast<double>(100 * (u + 1))).to(at::kBFloat16);
    reducer.reduce(u, g, padded / shard, /*owned=*/true);
  }
  reducer.finish();
  cuda::device_synchronize();
  return grads;
}

}  // namespace
#endif

TEST(GpuReducer, HybridGradientsEqualNoShardsWithLateCollectives) {
  SKIP_WITHOUT_GPU();
#ifdef SHARDTRAIN_TORCH_CUDA
  cuda::set_device(0);
  const int64_t units = 6, padded = int64_t{1} << 20;
  for (const int64_t budget : {fsdp::scatter_bytes(padded, padded / 2, 2, 4), int64_t{1} << 40}) {
    const auto hybrid = reduce_units(/*shard=*/2, /*replicate=*/2, budget, units, padded);
    const auto no_shard = reduce_units(/*shard=*/1, /*replicate=*/4, budget, units, padded);
    for (int64_t u = 0; u < units; ++u) {
      const auto want =
          no_shard[u].narrow(0, 0, padded / 2);  // rank 0's shard of the replicated gradient
      EXPECT_TRUE(hybrid[u].equal(want)) << "budget " << budget << " unit " << u << ": off by "
                                         << (hybrid[u] - want).abs().max().item<float>();
    }
  }
#endif
}
