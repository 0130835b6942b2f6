#include "shardtrain/comm/nccl_communicator.h"

#include <ATen/ATen.h>

#include "shardtrain/cuda/nvtx.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::comm {
namespace {

ncclDataType_t nccl_type(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return ncclFloat32;
    case at::kDouble: return ncclFloat64;
    case at::kBFloat16: return ncclBfloat16;
    case at::kHalf: return ncclFloat16;
    case at::kLong: return ncclInt64;
    case at::kInt: return ncclInt32;
    case at::kByte:
    case at::kBool: return ncclUint8;
    default: throw Error(std::string("NCCL backend: unsupported dtype ") + c10::toString(t));
  }
}

void require_cuda(const at::Tensor& t) {
  if (!t.is_cuda() || !t.is_contiguous()) throw Error("NCCL backend takes contiguous CUDA tensors");
}

class NcclWork : public Work {
 public:
  NcclWork(cuda::Event done, cudaStream_t compute, std::vector<at::Tensor> keep)
      : done_(std::move(done)), compute_(compute), keep_(std::move(keep)) {}
  void wait() override { done_.wait_on(compute_); }  // stream-ordered: the host does not block

 private:
  cuda::Event done_;
  cudaStream_t compute_;
  std::vector<at::Tensor> keep_;  // inputs and outputs outlive the collective's enqueue
};

}  // namespace

NcclCommunicator::NcclCommunicator(MpiComm group, std::string name, cudaStream_t compute)
    : Communicator(std::move(name)), mpi_(std::move(group)), comm_(cuda::NcclComm::bootstrap(mpi_.get())),
      compute_(compute), device_(at::kCUDA, static_cast<c10::DeviceIndex>(cuda::current_device())) {}

cudaStream_t NcclCommunicator::begin() {  // callers open an NVTX range named after the collective
  cuda::Event produced;
  produced.record(compute_);
  produced.wait_on(stream_.get());
  return stream_.get();
}

WorkPtr NcclCommunicator::finish(Op op, int64_t bytes, std::vector<at::Tensor> keep) {
  cuda::Event done;
  done.record(stream_.get());
  // A second event for the watchdog thread: it polls completion without touching the Work.
  auto probe = std::make_shared<cuda::Event>();
  probe->record(stream_.get());
  return tracked(op, bytes, std::make_unique<NcclWork>(std::move(done), compute_, std::move(keep)),
                 [probe] { return cudaEventQuery(probe->get()) == cudaSuccess; });
}

WorkPtr NcclCommunicator::all_gather_async(const at::Tensor& in, const at::Tensor& out) {
  check_all_gather(*this, in, out);
  require_cuda(in), require_cuda(out);
  stats_.add(Op::kAllGather, out.nbytes());
  cuda::NvtxRange range("all_gather " + name());
  auto s = begin();
  NCCL_CHECK(ncclAllGather(in.data_ptr(), out.data_ptr(), in.numel(), nccl_type(in.scalar_type()), comm_.get(), s));
  return finish(Op::kAllGather, out.nbytes(), {in, out});
}

WorkPtr NcclCommunicator::reduce_scatter_async(const at::Tensor& in, const at::Tensor& out) {
  check_reduce_scatter(*this, in, out);
  require_cuda(in), require_cuda(out);
  stats_.add(Op::kReduceScatter, in.nbytes());
  cuda::NvtxRange range("reduce_scatter " + name());
  auto s = begin();
  NCCL_CHECK(ncclReduceScatter(in.data_ptr(), out.data_ptr(), out.numel(), nccl_type(in.scalar_type()), ncclSum,
                               comm_.get(), s));
  return finish(Op::kReduceScatter, in.nbytes(), {in, out});
}

WorkPtr NcclCommunicator::all_reduce_async(const at::Tensor& t) {
  require_cuda(t);
  stats_.add(Op::kAllReduce, t.nbytes());
  cuda::NvtxRange range("all_reduce " + name());
  auto s = begin();
  NCCL_CHECK(ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), nccl_type(t.scalar_type()), ncclSum, comm_.get(), s));
  return finish(Op::kAllReduce, t.nbytes(), {t});
}

WorkPtr NcclCommunicator::broadcast_async(const at::Tensor& t, int root) {
  require_cuda(t);
  stats_.add(Op::kBroadcast, t.nbytes());
  cuda::NvtxRange range("broadcast " + name());
  auto s = begin();
  NCCL_CHECK(ncclBroadcast(t.data_ptr(), t.data_ptr(), t.numel(), nccl_type(t.scalar_type()), root, comm_.get(), s));
  return finish(Op::kBroadcast, t.nbytes(), {t});
}

void NcclCommunicator::barrier() {  // a one-element all-reduce, completed on the host
  stats_.add(Op::kBarrier, 0);
  void* buf = nullptr;
  CUDA_CHECK(cudaMallocAsync(&buf, sizeof(float), stream_.get()));
  CUDA_CHECK(cudaMemsetAsync(buf, 0, sizeof(float), stream_.get()));
  NCCL_CHECK(ncclAllReduce(buf, buf, 1, ncclFloat32, ncclSum, comm_.get(), stream_.get()));
  CUDA_CHECK(cudaFreeAsync(buf, stream_.get()));
  host_collective(Op::kBarrier, 0, [&] { stream_.synchronize(); });
}

}  // namespace shardtrain::comm
