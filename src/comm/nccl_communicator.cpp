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
  NcclWork(std::shared_ptr<cuda::Event> done, cudaStream_t compute, std::vector<at::Tensor> keep)
      : done_(std::move(done)), compute_(compute), keep_(std::move(keep)) {}
  void wait() override { done_->wait_on(compute_); }  // stream-ordered: the host does not block

 private:
  std::shared_ptr<cuda::Event> done_;  // shared with the watchdog's completion probe
  cudaStream_t compute_;
  std::vector<at::Tensor> keep_;  // inputs and outputs outlive the collective's enqueue
};

}  // namespace

NcclCommunicator::NcclCommunicator(MpiComm group, std::string name, cudaStream_t compute)
    : Communicator(std::move(name)), mpi_(std::move(group)), comm_(cuda::NcclComm::bootstrap(mpi_.get())),
      compute_(compute), device_(at::kCUDA, static_cast<c10::DeviceIndex>(cuda::current_device())) {
  for (int k = 0; k < kNumOps; ++k) nvtx_[k] = std::string(op_name(static_cast<Op>(k))) + " " + this->name();
}

cudaStream_t NcclCommunicator::begin() {
  // One event, recorded again each time: a stream wait takes the event's state at the call.
  produced_.record(compute_);
  produced_.wait_on(stream_.get());
  return stream_.get();
}

WorkPtr NcclCommunicator::finish(Op op, int64_t bytes, std::vector<at::Tensor> keep) {
  auto done = std::make_shared<cuda::Event>();
  done->record(stream_.get());
  return tracked(op, bytes, std::make_unique<NcclWork>(done, compute_, std::move(keep)),
                 [done] { return cudaEventQuery(done->get()) == cudaSuccess; });
}

WorkPtr NcclCommunicator::all_gather_async(const at::Tensor& in, const at::Tensor& out) {
  check_all_gather(*this, in, out);
  require_cuda(in), require_cuda(out);
  cuda::NvtxRange range(nvtx_[static_cast<int>(Op::kAllGather)]);
  auto s = begin();
  NCCL_CHECK(ncclAllGather(in.data_ptr(), out.data_ptr(), in.numel(), nccl_type(in.scalar_type()), comm_.get(), s));
  return finish(Op::kAllGather, out.nbytes(), {in, out});
}

WorkPtr NcclCommunicator::reduce_scatter_async(const at::Tensor& in, const at::Tensor& out) {
  check_reduce_scatter(*this, in, out);
  require_cuda(in), require_cuda(out);
  cuda::NvtxRange range(nvtx_[static_cast<int>(Op::kReduceScatter)]);
  auto s = begin();
  NCCL_CHECK(ncclReduceScatter(in.data_ptr(), out.data_ptr(), out.numel(), nccl_type(in.scalar_type()), ncclSum,
                               comm_.get(), s));
  return finish(Op::kReduceScatter, in.nbytes(), {in, out});
}

WorkPtr NcclCommunicator::all_reduce_async(const at::Tensor& t) {
  require_cuda(t);
  cuda::NvtxRange range(nvtx_[static_cast<int>(Op::kAllReduce)]);
  auto s = begin();
  NCCL_CHECK(ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), nccl_type(t.scalar_type()), ncclSum, comm_.get(), s));
  return finish(Op::kAllReduce, t.nbytes(), {t});
}

WorkPtr NcclCommunicator::broadcast_async(const at::Tensor& t, int root) {
  require_cuda(t);
  cuda::NvtxRange range(nvtx_[static_cast<int>(Op::kBroadcast)]);
  auto s = begin();
  NCCL_CHECK(ncclBroadcast(t.data_ptr(), t.data_ptr(), t.numel(), nccl_type(t.scalar_type()), root, comm_.get(), s));
  return finish(Op::kBroadcast, t.nbytes(), {t});
}

void NcclCommunicator::barrier() {  // a one-element all-reduce, completed on the host
  void* buf = nullptr;
  CUDA_CHECK(cudaMallocAsync(&buf, sizeof(float), stream_.get()));
  CUDA_CHECK(cudaMemsetAsync(buf, 0, sizeof(float), stream_.get()));
  NCCL_CHECK(ncclAllReduce(buf, buf, 1, ncclFloat32, ncclSum, comm_.get(), stream_.get()));
  CUDA_CHECK(cudaFreeAsync(buf, stream_.get()));
  host_collective(Op::kBarrier, 0, [&] { stream_.synchronize(); });
}

}  // namespace shardtrain::comm
