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
    default: throw runtime::Error(std::string("NCCL backend: unsupported dtype ") + c10::toString(t));
  }
}

using cuda::current_stream;  // LibTorch's current stream, not the legacy default

void require_cuda(const at::Tensor& t) {
  if (!t.is_cuda() || !t.is_contiguous()) throw runtime::Error("NCCL backend takes contiguous CUDA tensors");
}

class NcclWork : public Work {
 public:
  NcclWork(std::shared_ptr<cuda::Event> done, std::vector<at::Tensor> keep)
      : done_(std::move(done)), keep_(std::move(keep)) {}
  void wait() override { done_->wait_on(current_stream()); }  // stream-ordered: the host does not block

 private:
  std::shared_ptr<cuda::Event> done_;  // shared with the watchdog's completion probe
  std::vector<at::Tensor> keep_;  // inputs and outputs outlive the collective's enqueue
};

}  // namespace

NcclCommunicator::NcclCommunicator(runtime::MpiComm group, std::string name, cuda::NcclComm comm)
    : Communicator(std::move(name)), mpi_(std::move(group)),
      device_(at::kCUDA, static_cast<c10::DeviceIndex>(cuda::current_device())) {
  const int rank = comm.rank();
  gather_.comm = std::move(comm);
  reduce_.comm = cuda::NcclComm::split(gather_.comm, /*color=*/0, rank);  // same ranks, own queue
  for (int k = 0; k < kNumOps; ++k) nvtx_[k] = std::string(op_name(static_cast<Op>(k))) + " " + this->name();
}

void NcclCommunicator::bind_thread() const { cuda::set_device(device_.index()); }

cudaStream_t NcclCommunicator::begin(Lane& l) {
  // One event, recorded again each time: a stream wait takes the event's state at the call.
  l.produced.record(current_stream());
  l.produced.wait_on(l.stream.get());
  return l.stream.get();
}

WorkPtr NcclCommunicator::finish(Lane& l, Op op, int64_t bytes, std::vector<at::Tensor> keep) {
  auto done = std::make_shared<cuda::Event>();
  done->record(l.stream.get());
  return tracked(op, bytes, std::make_unique<NcclWork>(done, std::move(keep)), [done] { return done->query(); });
}

WorkPtr NcclCommunicator::all_gather_async(const at::Tensor& in, const at::Tensor& out) {
  check_all_gather(*this, in, out);
  require_cuda(in);
  require_cuda(out);
  cuda::NvtxRange range(nvtx_[static_cast<int>(Op::kAllGather)]);
  Lane& l = lane(Op::kAllGather);
  NCCL_CHECK(ncclAllGather(in.data_ptr(), out.data_ptr(), in.numel(), nccl_type(in.scalar_type()), l.comm.get(), begin(l)));
  return finish(l, Op::kAllGather, out.nbytes(), {in, out});
}

WorkPtr NcclCommunicator::reduce_scatter_async(const at::Tensor& in, const at::Tensor& out) {
  check_reduce_scatter(*this, in, out);
  require_cuda(in);
  require_cuda(out);
  cuda::NvtxRange range(nvtx_[static_cast<int>(Op::kReduceScatter)]);
  Lane& l = lane(Op::kReduceScatter);
  NCCL_CHECK(ncclReduceScatter(in.data_ptr(), out.data_ptr(), out.numel(), nccl_type(in.scalar_type()), ncclSum,
                               l.comm.get(), begin(l)));
  return finish(l, Op::kReduceScatter, in.nbytes(), {in, out});
}

WorkPtr NcclCommunicator::all_reduce_async(const at::Tensor& t) {
  require_cuda(t);
  cuda::NvtxRange range(nvtx_[static_cast<int>(Op::kAllReduce)]);
  Lane& l = lane(Op::kAllReduce);
  NCCL_CHECK(ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), nccl_type(t.scalar_type()), ncclSum, l.comm.get(),
                           begin(l)));
  return finish(l, Op::kAllReduce, t.nbytes(), {t});
}

WorkPtr NcclCommunicator::broadcast_async(const at::Tensor& t, int root) {
  require_cuda(t);
  cuda::NvtxRange range(nvtx_[static_cast<int>(Op::kBroadcast)]);
  Lane& l = lane(Op::kBroadcast);
  NCCL_CHECK(ncclBroadcast(t.data_ptr(), t.data_ptr(), t.numel(), nccl_type(t.scalar_type()), root, l.comm.get(),
                           begin(l)));
  return finish(l, Op::kBroadcast, t.nbytes(), {t});
}

void NcclCommunicator::barrier() {  // a one-element all-reduce on each lane, completed on the host
  for (Lane* l : {&gather_, &reduce_}) {
    void* buf = nullptr;
    const cudaStream_t s = l->stream.get();
    CUDA_CHECK(cudaMallocAsync(&buf, sizeof(float), s));
    CUDA_CHECK(cudaMemsetAsync(buf, 0, sizeof(float), s));
    NCCL_CHECK(ncclAllReduce(buf, buf, 1, ncclFloat32, ncclSum, l->comm.get(), s));
    CUDA_CHECK(cudaFreeAsync(buf, s));
  }
  host_collective(Op::kBarrier, 0, [&] {
    gather_.stream.synchronize();
    reduce_.stream.synchronize();
  });
}

}  // namespace shardtrain::comm
