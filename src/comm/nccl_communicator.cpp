#include "shardtrain/comm/nccl_communicator.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <list>
#include <mutex>
#ifdef SHARDTRAIN_TORCH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "shardtrain/cuda/nvtx.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::comm {
namespace {

ncclDataType_t nccl_type(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return ncclFloat32;
    case at::kDouble:
      return ncclFloat64;
    case at::kBFloat16:
      return ncclBfloat16;
    case at::kHalf:
      return ncclFloat16;
    case at::kLong:
      return ncclInt64;
    case at::kInt:
      return ncclInt32;
    case at::kByte:
    case at::kBool:
      return ncclUint8;
    default:
      throw runtime::Error(std::string("NCCL backend: unsupported dtype ") + c10::toString(t));
  }
}

using cuda::current_stream;  // LibTorch's current stream, not the legacy default

void require_cuda(const at::Tensor& t) {
  if (!t.is_cuda() || !t.is_contiguous())
    throw runtime::Error("NCCL backend takes contiguous CUDA tensors");
}

}  // namespace

// The buffers of collectives dropped without wait(), each with its collective's event: released
// once the event has completed, by the next collective issued (ProcessGroupNCCL's shelves).
class NcclCommunicator::Shelf {
 public:
  void stash(std::shared_ptr<cuda::Event> done, std::vector<at::Tensor> keep) {
    std::lock_guard<std::mutex> lock(mu_);
    items_.push_back({std::move(done), std::move(keep)});
  }
  void release_completed() {
    std::vector<at::Tensor> dead;  // freed after the lock
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = items_.begin(); it != items_.end();) {  // two lanes: any item may complete first
      if (!it->done->query()) {
        ++it;
        continue;
      }
      for (auto& t : it->keep) dead.push_back(std::move(t));
      it = items_.erase(it);
    }
  }
  ~Shelf() {
    try {
      release_completed();
    } catch (const std::exception&) {  // a failed device answers no query: keep them all
    }
    // Still in flight as the last owner goes: leaked, since freeing them could hand memory that
    // NCCL still writes to the compute stream.
    for (auto& item : items_) static_cast<void>(new std::vector<at::Tensor>(std::move(item.keep)));
  }

 private:
  struct Item {
    std::shared_ptr<cuda::Event> done;
    std::vector<at::Tensor> keep;
  };
  std::mutex mu_;
  std::list<Item> items_;
};

// The current stream's waits on collectives: an event recorded where the stream arrived at the
// wait, and the collective's done event; the stall is the time from the first to the second.
class NcclCommunicator::Stalls {
 public:
  void add(std::shared_ptr<cuda::Event> arrived, std::shared_ptr<cuda::Event> done) {
    std::lock_guard<std::mutex> lock(mu_);
    if (pairs_.size() >= kKeep)
      pairs_.erase(pairs_.begin());  // nobody times these (eval, generate): bounded
    pairs_.emplace_back(std::move(arrived), std::move(done));
  }
  std::vector<std::function<double()>> take() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::function<double()>> out;
    for (auto& [arrived, done] : pairs_)
      out.push_back([arrived, done] {
        return std::max(0.0, static_cast<double>(done->elapsed_ms_since(*arrived)) / 1e3);
      });
    pairs_.clear();
    return out;
  }

 private:
  static constexpr size_t kKeep = 4096;
  std::mutex mu_;
  std::vector<std::pair<std::shared_ptr<cuda::Event>, std::shared_ptr<cuda::Event>>> pairs_;
};

namespace {

// A collective's handle. Its buffers go in one of three explicit ways, never by an implicit sync:
// wait() on the stream that issued it (where the buffers were made: the allocator reuses them
// there only after the collective, FSDP2's stream-ordered lifetime); test() finding it complete;
// or, dropped otherwise, onto the shelf until its event completes (PyTorch 2.11's
// ProcessGroupNCCL stashes async collectives' tensors this way rather than recordStream).
class NcclWork : public Work {
 public:
  NcclWork(std::shared_ptr<cuda::Event> done, std::vector<at::Tensor> keep, cudaStream_t issued_on,
           std::shared_ptr<NcclCommunicator::Shelf> shelf,
           std::shared_ptr<NcclCommunicator::Stalls> stalls)
      : done_(std::move(done)),
        keep_(std::move(keep)),
        issued_on_(issued_on),
        shelf_(std::move(shelf)),
        stalls_(std::move(stalls)) {}
  void wait() override {
    const cudaStream_t s = current_stream();
    // Exposed communication is the compute stream's stall here, timed on the device.
    auto arrived = std::make_shared<cuda::Event>(/*timing=*/true);
    arrived->record(s);
    stalls_->add(std::move(arrived), done_);
    done_->wait_on(s);  // stream-ordered: the host does not block
    ordered_ = ordered_ || s == issued_on_;
  }
  // A lane's stream follows the collective; the caller's stream has not, so its buffers stay held.
  void chain() override { done_->wait_on(current_stream()); }
  bool test() override {
    complete_ = complete_ || done_->query();
    return complete_;
  }
  ~NcclWork() override {
    if (!ordered_ && !complete_) shelf_->stash(std::move(done_), std::move(keep_));
  }

 private:
  std::shared_ptr<cuda::Event> done_;  // shared with the watchdog's completion probe
  std::vector<at::Tensor> keep_;       // inputs and outputs: never freed while NCCL may use them
  cudaStream_t issued_on_;             // the caller's stream at issue
  std::shared_ptr<NcclCommunicator::Shelf> shelf_;
  std::shared_ptr<NcclCommunicator::Stalls> stalls_;
  bool ordered_ = false, complete_ = false;
};

}  // namespace

NcclCommunicator::NcclCommunicator(runtime::MpiComm group, std::string name, cuda::NcclComm comm)
    : Communicator(std::move(name)),
      mpi_(std::move(group)),
      device_(at::kCUDA, static_cast<c10::DeviceIndex>(cuda::current_device())),
      shelf_(std::make_shared<Shelf>()),
      stalls_(std::make_shared<Stalls>()) {
  const int rank = comm.rank();
  gather_.comm = std::move(comm);
  reduce_.comm = cuda::NcclComm::split(gather_.comm, /*color=*/0, rank);  // same ranks, own queue
  for (int k = 0; k < kNumOps; ++k)
    nvtx_[k] = std::string(op_name(static_cast<Op>(k))) + " " + this->name();
}

void NcclCommunicator::bind_thread() const { cuda::set_device(device_.index()); }

std::vector<std::function<double()>> NcclCommunicator::take_device_waits() {
  return stalls_->take();
}

cudaStream_t NcclCommunicator::begin(Lane& l) {
  // One event, recorded again each time: a stream wait takes the event's state at the call.
  l.produced.record(current_stream());
  l.produced.wait_on(l.stream.get());
  return l.stream.get();
}

WorkPtr NcclCommunicator::finish(Lane& l, Op op, int64_t bytes, std::vector<at::Tensor> keep) {
  shelf_->release_completed();
  auto done = std::make_shared<cuda::Event>(/*timing=*/true);  // the end of a stall (Stalls)
  done->record(l.stream.get());
  auto work = std::make_unique<NcclWork>(done, std::move(keep), current_stream(), shelf_, stalls_);
  return tracked(op, bytes, std::move(work), [done] { return done->query(); });
}

WorkPtr NcclCommunicator::all_gather_async(const at::Tensor& in, const at::Tensor& out) {
  check_all_gather(*this, in, out);
  require_cuda(in);
  require_cuda(out);
  cuda::NvtxRange range(nvtx_[static_cast<int>(Op::kAllGather)]);
  Lane& l = lane(Op::kAllGather);
  NCCL_CHECK(ncclAllGather(in.data_ptr(), out.data_ptr(), in.numel(), nccl_type(in.scalar_type()),
                           l.comm.get(), begin(l)));
  return finish(l, Op::kAllGather, out.nbytes(), {in, out});
}

WorkPtr NcclCommunicator::reduce_scatter_async(const at::Tensor& in, const at::Tensor& out) {
  check_reduce_scatter(*this, in, out);
  require_cuda(in);
  require_cuda(out);
  cuda::NvtxRange range(nvtx_[static_cast<int>(Op::kReduceScatter)]);
  Lane& l = lane(Op::kReduceScatter);
  NCCL_CHECK(ncclReduceScatter(in.data_ptr(), out.data_ptr(), out.numel(),
                               nccl_type(in.scalar_type()), ncclSum, l.comm.get(), begin(l)));
  return finish(l, Op::kReduceScatter, in.nbytes(), {in, out});
}

WorkPtr NcclCommunicator::all_reduce_async(const at::Tensor& t) {
  require_cuda(t);
  cuda::NvtxRange range(nvtx_[static_cast<int>(Op::kAllReduce)]);
  Lane& l = lane(Op::kAllReduce);
  NCCL_CHECK(ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), nccl_type(t.scalar_type()),
                           ncclSum, l.comm.get(), begin(l)));
  return finish(l, Op::kAllReduce, t.nbytes(), {t});
}

WorkPtr NcclCommunicator::all_reduce_after_async(const at::Tensor& t, Work& prior) {
  require_cuda(t);
  cuda::NvtxRange range(nvtx_[static_cast<int>(Op::kAllReduce)]);
  Lane& l = lane(Op::kAllReduce);
#ifdef SHARDTRAIN_TORCH_CUDA
  {
    // The lane's stream, not the caller's, waits for prior: compute runs on while both collectives
    // do.
    const c10::cuda::CUDAStreamGuard on_lane(
        c10::cuda::getStreamFromExternal(l.stream.get(), device_.index()));
    prior.chain();  // not wait(): that would tell the caller the reduce-scatter's buffers are free
  }
  const cudaStream_t s = l.stream.get();
#else
  prior.wait();  // without LibTorch's streams the caller's stream orders it
  const cudaStream_t s = begin(l);
#endif
  NCCL_CHECK(ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), nccl_type(t.scalar_type()),
                           ncclSum, l.comm.get(), s));
  return finish(l, Op::kAllReduce, t.nbytes(), {t});
}

WorkPtr NcclCommunicator::broadcast_async(const at::Tensor& t, int root) {
  require_cuda(t);
  cuda::NvtxRange range(nvtx_[static_cast<int>(Op::kBroadcast)]);
  Lane& l = lane(Op::kBroadcast);
  NCCL_CHECK(ncclBroadcast(t.data_ptr(), t.data_ptr(), t.numel(), nccl_type(t.scalar_type()), root,
                           l.comm.get(), begin(l)));
  return finish(l, Op::kBroadcast, t.nbytes(), {t});
}

WorkPtr NcclCommunicator::send_recv_async(const at::Tensor& send, int dst, const at::Tensor& recv,
                                          int src) {
  require_cuda(send);
  require_cuda(recv);
  if (send.numel() != recv.numel() || send.scalar_type() != recv.scalar_type())
    throw runtime::Error("send_recv: buffers of one size and dtype");
  cuda::NvtxRange range(nvtx_[static_cast<int>(Op::kSendRecv)]);
  Lane& l = lane(Op::kSendRecv);
  const cudaStream_t s = begin(l);
  const ncclDataType_t type = nccl_type(send.scalar_type());
  NCCL_CHECK(ncclGroupStart());
  NCCL_CHECK(ncclSend(send.data_ptr(), send.numel(), type, dst, l.comm.get(), s));
  NCCL_CHECK(ncclRecv(recv.data_ptr(), recv.numel(), type, src, l.comm.get(), s));
  NCCL_CHECK(ncclGroupEnd());
  return finish(l, Op::kSendRecv, send.nbytes(), {send, recv});
}

WorkPtr NcclCommunicator::all_to_all_async(const at::Tensor& send,
                                           const std::vector<int64_t>& send_rows,
                                           const at::Tensor& recv,
                                           const std::vector<int64_t>& recv_rows) {
  check_all_to_all(*this, send, send_rows, recv, recv_rows);
  require_cuda(send);
  require_cuda(recv);
  cuda::NvtxRange range(nvtx_[static_cast<int>(Op::kAllToAll)]);
  Lane& l = lane(Op::kAllToAll);
  const cudaStream_t s = begin(l);
  const ncclDataType_t type = nccl_type(send.scalar_type());
  int64_t row = 1;
  for (int64_t d = 1; d < send.dim(); ++d) row *= send.size(d);
  const int64_t elt = send.element_size();
  // One grouped send and receive per peer (NCCL has no all-to-all-v); empty ones are skipped.
  NCCL_CHECK(ncclGroupStart());
  int64_t sent = 0, received = 0;
  for (int r = 0; r < size(); ++r) {
    const int64_t out = send_rows[static_cast<size_t>(r)] * row;
    const int64_t in = recv_rows[static_cast<size_t>(r)] * row;
    if (out > 0)
      NCCL_CHECK(ncclSend(static_cast<char*>(send.data_ptr()) + sent * elt, out, type, r,
                          l.comm.get(), s));
    if (in > 0)
      NCCL_CHECK(ncclRecv(static_cast<char*>(recv.data_ptr()) + received * elt, in, type, r,
                          l.comm.get(), s));
    sent += out;
    received += in;
  }
  NCCL_CHECK(ncclGroupEnd());
  return finish(l, Op::kAllToAll, send.nbytes(), {send, recv});
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
