// GPU checks that need MPI in this process (an NCCL communicator over MPI_COMM_SELF), run under
// mpirun -np 1: a collective dropped without wait() keeps its buffers from the caching allocator
// until it has completed on the device, and LoRA dropout draws its masks on the device. Skipped,
// with the reason printed, without a GPU.
#include <gtest/gtest.h>

#include "gpu_skip.h"
#include "mpi_gtest_main.h"
#include "sft_step.h"
#include "shardtrain/comm/mesh.h"
#include "shardtrain/runtime/mpi_env.h"
#ifdef SHARDTRAIN_TORCH_CUDA
#include <ATen/ATen.h>
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include <chrono>
#include <cmath>

#include "shardtrain/comm/nccl_communicator.h"
#include "shardtrain/cuda/cuda_handles.h"
#include "shardtrain/fsdp/engine.h"
#include "shardtrain/fsdp/host_offload.h"
#include "shardtrain/model/lora.h"
#include "shardtrain/runtime/error.h"
#endif

using namespace shardtrain;

namespace {
runtime::MpiEnv* g_env = nullptr;

#ifdef SHARDTRAIN_TORCH_CUDA
int64_t allocated_bytes() {
  const auto s = c10::cuda::CUDACachingAllocator::getDeviceStats(0);
  return s.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].current;
}
#endif
}  // namespace

// Expert parallelism's all-to-all by rows over NCCL (grouped sends and receives, empty ones
// skipped): at world 1 every row comes back to its place, whatever its count, none included.
TEST(GpuMoe, AllToAllOverNcclSendsRowsByCount) {
  SKIP_WITHOUT_GPU();
#ifdef SHARDTRAIN_TORCH_CUDA
  cuda::set_device(0);
  comm::NcclCommunicator nccl(runtime::MpiComm::dup(MPI_COMM_SELF), "self",
                              cuda::NcclComm::bootstrap(MPI_COMM_SELF));
  const auto opts = at::TensorOptions().dtype(at::kBFloat16).device(at::kCUDA, 0);
  for (const int64_t rows : {int64_t{7}, int64_t{0}}) {
    const at::Tensor send = at::randn({rows, 96}, opts);
    const at::Tensor recv = at::full({rows, 96}, -1.0, opts);
    nccl.all_to_all_async(send, {rows}, recv, {rows})->wait();
    EXPECT_TRUE(at::equal(send.cpu(), recv.cpu())) << rows << " rows";
  }
  EXPECT_THROW(nccl.all_to_all_async(at::zeros({3, 4}, opts), {2}, at::zeros({3, 4}, opts), {3}),
               runtime::Error);
  cuda::device_synchronize();
#endif
}

// The compute stream is kept busy by a spin kernel, so the all-reduce (which waits for it) cannot
// have run when its handle is dropped: the tensor's memory must stay allocated. Before this was
// fixed the handle freed it at once, and the allocator could hand it to the compute stream while
// NCCL would still write it.
TEST(GpuNccl, UnwaitedCollectiveKeepsItsBuffersUntilItCompletes) {
  SKIP_WITHOUT_GPU();
#ifdef SHARDTRAIN_TORCH_CUDA
  cuda::set_device(0);
  comm::NcclCommunicator nccl(runtime::MpiComm::dup(MPI_COMM_SELF), "self",
                              cuda::NcclComm::bootstrap(MPI_COMM_SELF));
  const auto opts = at::TensorOptions().dtype(at::kFloat).device(at::kCUDA, 0);
  const int64_t n = int64_t{1} << 20;  // 4 MiB, a multiple of the allocator's rounding
  const int64_t bytes = n * 4;
  at::empty({1}, opts);  // the caching allocator exists only after LibTorch's first CUDA allocation
  cuda::device_synchronize();
  const int64_t base = allocated_bytes();

  at::cuda::sleep(int64_t{2} << 30);  // about a second on the current (compute) stream
  {
    at::Tensor t = at::ones({n}, opts);
    comm::WorkPtr dropped = nccl.all_reduce_async(t);
  }  // handle and tensor both gone, the collective not even started
  EXPECT_EQ(allocated_bytes() - base, bytes)
      << "the buffer of a collective still in flight was freed";

  cuda::device_synchronize();
  {
    at::Tensor small = at::ones({8}, opts);
    nccl.all_reduce_async(small)->wait();  // issuing releases what has completed since
  }
  EXPECT_EQ(allocated_bytes(), base) << "a completed collective's buffer was kept";

  {
    at::Tensor t = at::ones({n}, opts);
    comm::WorkPtr waited = nccl.all_reduce_async(t);
    waited->wait();  // the compute stream follows the collective: its buffer may go at once
  }
  EXPECT_EQ(allocated_bytes(), base) << "a waited collective's buffer was kept";
  cuda::device_synchronize();
#endif
}

TEST(GpuLora, DropoutMaskIsDrawnOnTheDeviceAndReproducible) {
  SKIP_WITHOUT_GPU();
#ifdef SHARDTRAIN_TORCH_CUDA
  cuda::set_device(0);
  const double p = 0.3;
  const auto x =
      at::ones({200, 500}, at::TensorOptions().dtype(at::kBFloat16).device(at::kCUDA, 0));
  const auto y = model::lora_dropout(x, p, 17);
  EXPECT_TRUE(y.is_cuda());
  EXPECT_EQ(y.scalar_type(), at::kBFloat16);
  EXPECT_NEAR(y.eq(0).to(at::kDouble).mean().item<double>(), p, 0.005);  // 100k draws
  EXPECT_TRUE(y.equal(model::lora_dropout(x, p, 17))) << "the seed alone decides the mask";
  EXPECT_FALSE(y.equal(model::lora_dropout(x, p, 18)));
  // Another generator's draws between two calls change nothing: the mask has its own generator.
  (void)at::rand({1000}, x.options().dtype(at::kFloat));
  EXPECT_TRUE(y.equal(model::lora_dropout(x, p, 17)));
#endif
}

// The offload's host thread makes the engine's GPU current before its first job (the default
// ThreadStart): its CUDA calls land on the rank's device, not on a new context on GPU 0.
TEST(GpuOffload, HostThreadRunsOnTheEnginesDevice) {
  SKIP_WITHOUT_GPU();
#ifdef SHARDTRAIN_TORCH_CUDA
  const int last = cuda::device_count() - 1;  // a rank's device need not be 0
  cuda::set_device(last);
  int seen = -1;
  {
    fsdp::HostOffload host(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(last)), {nullptr});
    host.run(
        0, [&] { seen = cuda::current_device(); }, /*refresh=*/false);
    host.settle();
  }
  EXPECT_EQ(seen, last);
#endif
}

// --cpu-offload queues a whole step without the host waiting for the device: the gathers' copies
// from the pinned mirrors, the gradients' copies back on their own stream. With the compute
// stream held by a spin kernel, forward_backward returns long before the device has run any of
// it (an event recorded after it is still pending); grad_shards() is where the host waits.
TEST(GpuOffload, NoHostSyncInsideAStep) {
  SKIP_WITHOUT_GPU();
#ifdef SHARDTRAIN_TORCH_CUDA
  cuda::set_device(0);
  test_steps::EngineOptions f;
  f.cpu_offload = true;
  f.param_dtype = at::kBFloat16;
  const runtime::Topology& topo = g_env->topology();
  auto groups = comm::make_parallel_dims(fsdp::group_layout(f.sharding, topo, 0), topo,
                                         /*nccl=*/true);
  model::ModelConfig m = model::model_preset("tiny");
  fsdp::FsdpEngine eng(test_steps::spec(m, f, at::Device(at::kCUDA, 0)), groups, 3, nullptr);
  optim::Optimizer opt = fsdp::make_optimizer(eng, optim::OptimizerConfig{});
  const auto tokens = at::randint(3, m.vocab_size, {2, 64}, at::kLong);
  const std::vector<model::Batch> micro{{tokens, tokens.clone()}};
  for (int warm = 0; warm < 2; ++warm) {  // the allocators and the host thread warmed up
    test_steps::sft_step(eng, micro);
    opt.step(1e-3, eng.grad_shards());
    eng.release_grads();
  }
  cuda::device_synchronize();
  using clock = std::chrono::steady_clock;
  at::cuda::sleep(int64_t{2} << 30);  // about a second on the compute stream
  const auto t0 = clock::now();
  const fsdp::GradResult g = test_steps::sft_step(eng, micro, /*read_loss=*/false);
  const double queued_s = std::chrono::duration<double>(clock::now() - t0).count();
  cuda::Event after;
  after.record(cuda::current_stream());
  EXPECT_FALSE(after.query()) << "the step ran on the device before the host got back";
  const auto grads = eng.grad_shards();  // the host waits here for the gradients' copies
  const double landed_s = std::chrono::duration<double>(clock::now() - t0).count();
  EXPECT_LT(queued_s, 0.25) << "forward_backward waited for the device";
  EXPECT_GT(landed_s, 0.5) << "the gradients were read before the device computed them";
  for (const auto& t : grads) EXPECT_TRUE(t.device().is_cpu() && t.is_pinned());
  EXPECT_TRUE(std::isfinite(g.loss_t.item<double>()));
  opt.step(1e-3, grads);
  eng.release_grads();
  opt.settle();
#endif
}

int main(int argc, char** argv) { mpi_gtest_main(argc, argv, g_env); }
