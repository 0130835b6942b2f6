// The collective interface the FSDP engine talks to: all-gather into a flat buffer,
// reduce-scatter, all-reduce, broadcast and barrier, each with an async variant. MPI (CPU) and
// NCCL (GPU) implement it; every call is counted per kind, in bytes of the full buffer.
#pragma once
#include <ATen/core/Tensor.h>
#include <mpi.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "shardtrain/comm/collective_log.h"

namespace shardtrain::comm {

struct OpStats {
  int64_t calls = 0, bytes = 0;
};

// bytes: the unsharded buffer (all-gather output, reduce-scatter input, all-reduce and
// broadcast tensor), as nccl-tests reports "size".
struct CommStats {
  std::array<OpStats, kNumOps> ops{};
  void add(Op op, int64_t bytes) {
    ops[static_cast<int>(op)].calls++;
    ops[static_cast<int>(op)].bytes += bytes;
  }
  const OpStats& operator[](Op op) const { return ops[static_cast<int>(op)]; }
};

class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;  // blocks until the collective is complete on this rank
  // Without blocking: has it completed? (NCCL: its event; MPI: MPI_Test, which also progresses it.)
  virtual bool test() = 0;
  // Orders the current stream, another collective's lane (Communicator::all_reduce_after_async),
  // after this collective without completing it for its caller: test() still asks the device,
  // and the caller's stream has not waited, so its buffers are still in use. Backends whose
  // wait() blocks the host have nothing to chain: they wait.
  virtual void chain() { wait(); }
};
using WorkPtr = std::unique_ptr<Work>;

class Communicator {
 public:
  explicit Communicator(std::string name) : name_(std::move(name)) {}
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  const std::string& name() const { return name_; }

  // out [size * in.numel()]: rank r's `in` lands at [r * n, (r + 1) * n). Same dtype.
  virtual WorkPtr all_gather_async(const at::Tensor& in, const at::Tensor& out) = 0;
  // out = the sum over ranks of in[rank * n, (rank + 1) * n), n = out.numel().
  virtual WorkPtr reduce_scatter_async(const at::Tensor& in, const at::Tensor& out) = 0;
  virtual WorkPtr all_reduce_async(const at::Tensor& t) = 0;  // sum, in place
  virtual WorkPtr broadcast_async(const at::Tensor& t, int root) = 0;
  // An all-reduce that starts when `prior` (another group's collective that produces t) completes,
  // ordered on the device without the caller's stream waiting; nullptr where the backend cannot
  // (MPI): then issue all_reduce_async once prior has completed.
  virtual WorkPtr all_reduce_after_async(const at::Tensor& t, Work& prior) {
    (void)t;
    (void)prior;
    return nullptr;
  }
  virtual void barrier() = 0;
  // Point to point, both at once: `send` to rank dst and `recv` (same size and dtype, another
  // buffer) from rank src; every rank of a ring calls it together (context parallelism's K/V).
  // Backends without point-to-point (tests' stand-ins) throw.
  virtual WorkPtr send_recv_async(const at::Tensor& send, int dst, const at::Tensor& recv, int src);
  // All to all by rows (dim 0): send_rows[r] rows of `send`, in rank order, go to rank r, and
  // recv_rows[r] rows from rank r land in `recv` in rank order (contiguous, one row shape and
  // dtype). Every rank of the group calls it together, with counts that agree (expert
  // parallelism's tokens). bytes: what this rank sends. Backends without it throw.
  virtual WorkPtr all_to_all_async(const at::Tensor& send, const std::vector<int64_t>& send_rows,
                                   const at::Tensor& recv, const std::vector<int64_t>& recv_rows);
  // The MPI communicator over the same ranks: every group is bootstrapped from MPI, and
  // checkpoints (MPI-IO) and watchdogs use it beside NCCL.
  virtual MPI_Comm mpi() const = 0;
  virtual at::Device device() const { return at::kCPU; }  // where its tensors live
  // For threads that poll this communicator (watchdogs): select its device before any device
  // call, so a GPU rank's helper threads never create a context on GPU 0. A no-op on CPU.
  virtual void bind_thread() const {}
  // The device waits on this communicator's collectives since the last call (CUDA: the compute
  // stream stalled at wait() until the collective finished), each a function giving the stall in
  // seconds once the device has passed it; the host's waits are in log() instead.
  virtual std::vector<std::function<double()>> take_device_waits() { return {}; }

  void all_gather(const at::Tensor& in, const at::Tensor& out) {
    all_gather_async(in, out)->wait();
  }
  void reduce_scatter(const at::Tensor& in, const at::Tensor& out) {
    reduce_scatter_async(in, out)->wait();
  }
  void all_reduce(const at::Tensor& t) { all_reduce_async(t)->wait(); }
  void broadcast(const at::Tensor& t, int root) { broadcast_async(t, root)->wait(); }
  double all_reduce_sum(double v);  // a scalar convenience, counted like any all-reduce

  const CommStats& stats() const { return stats_; }
  void reset_stats() { stats_ = CommStats{}; }
  // Sequence-numbered history and blocked time; the watchdog reads it from its own thread.
  CollectiveLog& log() const { return *log_; }
  // A blocking host-side collective on mpi() (or a subset of its ranks, all calling at the same
  // point), numbered, timed and counted like the others so the watchdog sees a hang inside it.
  void host_collective(Op op, int64_t bytes, const std::function<void()>& call);

 protected:
  // Called right after a backend issued a collective: counts and numbers it, times the host's wait.
  // done: an asynchronous completion probe (NCCL's event); without it, completion is the wait.
  WorkPtr tracked(Op op, int64_t bytes, WorkPtr issued, std::function<bool()> done = nullptr);
  CommStats stats_;
  std::shared_ptr<CollectiveLog> log_ = std::make_shared<CollectiveLog>();

 private:
  std::string name_;
};

// Checks shapes and dtypes shared by every backend; throws Error naming the collective.
void check_all_gather(const Communicator& c, const at::Tensor& in, const at::Tensor& out);
void check_reduce_scatter(const Communicator& c, const at::Tensor& in, const at::Tensor& out);
void check_all_to_all(const Communicator& c, const at::Tensor& send,
                      const std::vector<int64_t>& send_rows, const at::Tensor& recv,
                      const std::vector<int64_t>& recv_rows);

}  // namespace shardtrain::comm
