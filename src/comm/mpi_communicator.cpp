#include "shardtrain/comm/mpi_communicator.h"

#include <ATen/ATen.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <mutex>

#include "shardtrain/runtime/error.h"

namespace shardtrain::comm {
namespace {

template <typename T>
void sum16(void* in, void* inout, int* len, MPI_Datatype*) {  // fp32 accumulate, one rounding
  auto* a = static_cast<const T*>(in);
  auto* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i)
    b[i] = static_cast<T>(static_cast<float>(a[i]) + static_cast<float>(b[i]));
}

MPI_Op sum_op(at::ScalarType t) {
  static MPI_Op bf16 = MPI_OP_NULL, fp16 = MPI_OP_NULL;
  static std::once_flag once;
  std::call_once(once, [] {
    MPI_CHECK(MPI_Op_create(&sum16<c10::BFloat16>, /*commute=*/1, &bf16));
    MPI_CHECK(MPI_Op_create(&sum16<c10::Half>, 1, &fp16));
  });
  if (t == at::kBFloat16) return bf16;
  if (t == at::kHalf) return fp16;
  return MPI_SUM;
}

MPI_Datatype mpi_type(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return MPI_FLOAT;
    case at::kDouble:
      return MPI_DOUBLE;
    case at::kBFloat16:
    case at::kHalf:
      return MPI_UINT16_T;  // moved as 16-bit words; sums through sum_op
    case at::kLong:
      return MPI_INT64_T;
    case at::kInt:
      return MPI_INT32_T;
    case at::kByte:
    case at::kBool:
      return MPI_UINT8_T;
    default:
      throw runtime::Error(std::string("MPI backend: unsupported dtype ") + c10::toString(t));
  }
}

int count_of(const at::Tensor& t) {
  if (t.numel() > INT32_MAX)
    throw runtime::Error("MPI backend: a buffer over 2^31 elements needs chunking");
  return static_cast<int>(t.numel());
}

class MpiWork : public Work {
 public:
  MpiWork(std::vector<at::Tensor> keep) : keep_(std::move(keep)) {}
  MPI_Request* request(int i = 0) { return &req_[i]; }  // a send-receive uses two
  void wait() override { MPI_CHECK(MPI_Waitall(2, req_, MPI_STATUSES_IGNORE)); }
  bool test() override {
    int done = 1;  // MPI_Testall sets completed requests to MPI_REQUEST_NULL
    MPI_CHECK(MPI_Testall(2, req_, &done, MPI_STATUSES_IGNORE));
    return done != 0;
  }
  ~MpiWork() override {
    MPI_Waitall(2, req_, MPI_STATUSES_IGNORE);  // never free buffers in flight
  }

 private:
  MPI_Request req_[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  std::vector<at::Tensor> keep_;  // the buffers stay alive until the collective completes
};

void require_cpu(const at::Tensor& t) {
  if (!t.device().is_cpu())
    throw runtime::Error("MPI backend takes CPU tensors; use the NCCL backend for CUDA");
}

}  // namespace

MpiCommunicator::MpiCommunicator(runtime::MpiComm comm, std::string name)
    : Communicator(std::move(name)),
      comm_(std::move(comm)),
      rank_(comm_.rank()),
      size_(comm_.size()) {}

WorkPtr MpiCommunicator::all_gather_async(const at::Tensor& in, const at::Tensor& out) {
  check_all_gather(*this, in, out);
  require_cpu(in);
  require_cpu(out);
  auto w = std::make_unique<MpiWork>(std::vector<at::Tensor>{in, out});
  const auto type = mpi_type(in.scalar_type());
  MPI_CHECK(MPI_Iallgather(in.data_ptr(), count_of(in), type, out.data_ptr(), count_of(in), type,
                           comm_.get(), w->request()));
  return tracked(Op::kAllGather, out.nbytes(), std::move(w));
}

WorkPtr MpiCommunicator::reduce_scatter_async(const at::Tensor& in, const at::Tensor& out) {
  check_reduce_scatter(*this, in, out);
  require_cpu(in);
  require_cpu(out);
  auto w = std::make_unique<MpiWork>(std::vector<at::Tensor>{in, out});
  MPI_CHECK(MPI_Ireduce_scatter_block(in.data_ptr(), out.data_ptr(), count_of(out),
                                      mpi_type(in.scalar_type()), sum_op(in.scalar_type()),
                                      comm_.get(), w->request()));
  return tracked(Op::kReduceScatter, in.nbytes(), std::move(w));
}

WorkPtr MpiCommunicator::all_reduce_async(const at::Tensor& t) {
  require_cpu(t);
  if (!t.is_contiguous()) throw runtime::Error("all_reduce: the tensor must be contiguous");
  auto w = std::make_unique<MpiWork>(std::vector<at::Tensor>{t});
  MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, t.data_ptr(), count_of(t), mpi_type(t.scalar_type()),
                           sum_op(t.scalar_type()), comm_.get(), w->request()));
  return tracked(Op::kAllReduce, t.nbytes(), std::move(w));
}

WorkPtr MpiCommunicator::broadcast_async(const at::Tensor& t, int root) {
  require_cpu(t);
  if (!t.is_contiguous()) throw runtime::Error("broadcast: the tensor must be contiguous");
  auto w = std::make_unique<MpiWork>(std::vector<at::Tensor>{t});
  MPI_CHECK(MPI_Ibcast(t.data_ptr(), count_of(t), mpi_type(t.scalar_type()), root, comm_.get(),
                       w->request()));
  return tracked(Op::kBroadcast, t.nbytes(), std::move(w));
}

void MpiCommunicator::barrier() {
  auto w = std::make_unique<MpiWork>(std::vector<at::Tensor>{});
  MPI_CHECK(MPI_Ibarrier(comm_.get(), w->request()));
  tracked(Op::kBarrier, 0, std::move(w))->wait();
}

std::unique_ptr<MpiCommunicator> mpi_world() {
  return std::make_unique<MpiCommunicator>(runtime::MpiComm::dup(), "world");
}

WorkPtr MpiCommunicator::send_recv_async(const at::Tensor& send, int dst, const at::Tensor& recv,
                                         int src) {
  require_cpu(send);
  require_cpu(recv);
  if (!send.is_contiguous() || !recv.is_contiguous() || send.numel() != recv.numel() ||
      send.scalar_type() != recv.scalar_type())
    throw runtime::Error("send_recv: contiguous buffers of one size and dtype");
  auto w = std::make_unique<MpiWork>(std::vector<at::Tensor>{send, recv});
  const auto type = mpi_type(send.scalar_type());
  constexpr int kTag = 7;  // the only point-to-point traffic: calls match in order
  MPI_CHECK(
      MPI_Irecv(recv.data_ptr(), count_of(recv), type, src, kTag, comm_.get(), w->request(0)));
  MPI_CHECK(
      MPI_Isend(send.data_ptr(), count_of(send), type, dst, kTag, comm_.get(), w->request(1)));
  return tracked(Op::kSendRecv, send.nbytes(), std::move(w));
}

WorkPtr MpiCommunicator::all_to_all_async(const at::Tensor& send,
                                          const std::vector<int64_t>& send_rows,
                                          const at::Tensor& recv,
                                          const std::vector<int64_t>& recv_rows) {
  check_all_to_all(*this, send, send_rows, recv, recv_rows);
  require_cpu(send);
  require_cpu(recv);
  // Counts in rows of one derived type: a row's bytes, so no count overflows int.
  int64_t row = static_cast<int64_t>(send.element_size());
  for (int64_t d = 1; d < send.dim(); ++d) row *= send.size(d);
  const auto ints = [](const std::vector<int64_t>& v, std::vector<int>& counts,
                       std::vector<int>& displs) {
    int at = 0;
    for (const int64_t c : v) {
      counts.push_back(static_cast<int>(c));
      displs.push_back(at);
      at += static_cast<int>(c);
    }
  };
  std::vector<int> sc, sd, rc, rd;
  ints(send_rows, sc, sd);
  ints(recv_rows, rc, rd);
  host_collective(Op::kAllToAll, static_cast<int64_t>(send.nbytes()), [&] {
    MPI_Datatype type;
    MPI_CHECK(MPI_Type_contiguous(static_cast<int>(row), MPI_BYTE, &type));
    MPI_CHECK(MPI_Type_commit(&type));
    MPI_CHECK(MPI_Alltoallv(send.data_ptr(), sc.data(), sd.data(), type, recv.data_ptr(), rc.data(),
                            rd.data(), type, comm_.get()));
    MPI_CHECK(MPI_Type_free(&type));
  });
  return std::make_unique<MpiWork>(std::vector<at::Tensor>{});  // complete: nothing to wait for
}

}  // namespace shardtrain::comm
