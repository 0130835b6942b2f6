// The gradient reducer's state machine against collectives that run late, as on a GPU: a
// deferred "device" on the host runs each collective only when something completes it, reading
// its buffers then, not at issue. A reducer that reuses a send buffer before its reduce-scatter
// has run (the hybrid-shard race: a lane's wait taken for completion) sums the wrong gradient.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <vector>

#include "shardtrain/comm/communicator.h"
#include "shardtrain/comm/parallel_dims.h"
#include "shardtrain/fsdp/gradient_reducer.h"

using namespace shardtrain;

namespace {

// Collectives queued in issue order; each runs when completed, after those it was chained on.
struct DeferredDevice {
  struct Op {
    std::function<void()> run;
    std::vector<std::shared_ptr<Op>> after;  // chained: runs only once these have
    bool done = false;
  };
  std::vector<std::shared_ptr<Op>> queued;
  std::vector<std::shared_ptr<Op>>* chaining = nullptr;  // the dependencies of the op being issued

  void complete(const std::shared_ptr<Op>& op) {
    if (op->done) return;
    for (const auto& a : op->after) complete(a);
    op->run();
    op->done = true;
  }
  void complete_all() {
    for (const auto& op : queued) complete(op);
  }
  int64_t pending() const {
    int64_t n = 0;
    for (const auto& op : queued) n += op->done ? 0 : 1;
    return n;
  }
};

class DeferredWork : public comm::Work {
 public:
  DeferredWork(DeferredDevice& dev, std::shared_ptr<DeferredDevice::Op> op)
      : dev_(dev), op_(std::move(op)) {}
  void wait() override {
    dev_.complete(op_);
  }  // the caller's stream follows it: on the host, it has run
  bool test() override { return op_->done; }
  void chain() override { dev_.chaining->push_back(op_); }  // another lane follows it: nothing runs

 private:
  DeferredDevice& dev_;
  std::shared_ptr<DeferredDevice::Op> op_;
};

// Rank 0 of `n` ranks that all hold the same data: a reduce-scatter gives n x its chunk, an
// all-reduce n x.
class DeferredGroup : public comm::Communicator {
 public:
  DeferredGroup(DeferredDevice& dev, int n) : Communicator("deferred"), dev_(dev), n_(n) {}
  int rank() const override { return 0; }
  int size() const override { return n_; }
  comm::WorkPtr all_gather_async(const at::Tensor&, const at::Tensor&) override { return nullptr; }
  comm::WorkPtr broadcast_async(const at::Tensor&, int) override { return nullptr; }
  void barrier() override {}
  MPI_Comm mpi() const override { return MPI_COMM_NULL; }

  comm::WorkPtr reduce_scatter_async(const at::Tensor& in, const at::Tensor& out) override {
    const double n = n_;
    return issue(comm::Op::kReduceScatter, in.nbytes(),
                 [in, out, n] { out.copy_(in.narrow(0, 0, out.numel()) * n); }, {});
  }
  comm::WorkPtr all_reduce_async(const at::Tensor& t) override {
    const double n = n_;
    return issue(comm::Op::kAllReduce, t.nbytes(), [t, n] { t.mul_(n); }, {});
  }
  comm::WorkPtr all_reduce_after_async(const at::Tensor& t, comm::Work& prior) override {
    std::vector<std::shared_ptr<DeferredDevice::Op>> after;
    dev_.chaining = &after;
    prior.chain();  // as NCCL's lane: its stream waits for prior
    dev_.chaining = nullptr;
    const double n = n_;
    return issue(
        comm::Op::kAllReduce, t.nbytes(), [t, n] { t.mul_(n); }, std::move(after));
  }

 private:
  comm::WorkPtr issue(comm::Op op, int64_t bytes, std::function<void()> run,
                      std::vector<std::shared_ptr<DeferredDevice::Op>> after) {
    auto o = std::make_shared<DeferredDevice::Op>();
    o->run = std::move(run);
    o->after = std::move(after);
    dev_.queued.push_back(o);
    auto probe = [o] { return o->done; };
    return tracked(op, bytes, std::make_unique<DeferredWork>(dev_, o),
                   probe);  // the real TrackedWork around it
  }
  DeferredDevice& dev_;
  int n_;
};

comm::ParallelDims deferred_groups(DeferredDevice& dev, int shard, int replicate) {
  comm::ParallelDims g;
  g.layout.shard_size = shard;
  g.layout.replicate_size = replicate;
  g.world = std::make_unique<DeferredGroup>(dev, shard * replicate);
  g.shard = std::make_unique<DeferredGroup>(dev, shard);
  g.replicate = std::make_unique<DeferredGroup>(dev, replicate);
  return g;
}

// Unit u's gradient: bf16, distinct per unit, all units the same size (so a send buffer fits the
// next).
at::Tensor unit_grad(int64_t u, int64_t padded) {
  return (at::arange(padded, at::kFloat) * 0.25 + static_cast<double>(100 * (u + 1)))
      .to(at::kBFloat16);
}

}  // namespace

// bf16 gradients reduced in fp32: each unit's send buffer is a converted copy, reused for the next
// unit's once free. Nothing runs on the "device" until finish(): a buffer reused earlier is read
// by its reduce-scatter with the next unit's values in it.
TEST(GradientReducer, HybridSendBufferIsNotReusedBeforeItsReduceScatterRan) {
  const int64_t units = 4, shard_numel = 16;
  for (const int shard : {2, 1}) {  // hybrid_shard, and no_shard across replicas
    DeferredDevice dev;
    auto groups = deferred_groups(dev, shard, 2);
    const int64_t padded = shard_numel * shard;
    std::vector<at::Tensor> grads(units);
    fsdp::GradientReducer reducer(
        groups, at::kFloat, [&grads](int64_t u) -> at::Tensor& { return grads[u]; }, [] {});
    reducer.set_budget(
        int64_t{1} << 30);  // many in flight: the race needs a reuse while one is queued
    for (int64_t u = 0; u < units; ++u)
      reducer.reduce(u, unit_grad(u, padded), shard_numel, /*owned=*/true);
    EXPECT_EQ(dev.pending(), shard > 1 ? 2 * units : units)
        << "shard " << shard << ": nothing should have run yet";
    dev.complete_all();
    reducer.finish();
    for (int64_t u = 0; u < units; ++u) {
      const auto want = unit_grad(u, padded).to(at::kFloat).narrow(0, 0, shard_numel) * (2 * shard);
      ASSERT_TRUE(grads[u].defined());
      EXPECT_TRUE(grads[u].equal(want)) << "shard " << shard << " unit " << u << ": off by "
                                        << (grads[u] - want).abs().max().item<float>();
    }
    EXPECT_EQ(reducer.bytes_in_flight(), 0);
  }
}

// With the default budget (one unit's reduction), the shards waiting for their all-reduce count
// too: bytes in flight never exceed it, and the oldest reduction is completed, all-reduce included.
TEST(GradientReducer, HybridAllReducesCountAgainstTheBudget) {
  const int64_t units = 6, shard_numel = 16;
  for (const int shard : {2, 1}) {
    DeferredDevice dev;
    auto groups = deferred_groups(dev, shard, 2);
    const int64_t padded = shard_numel * shard;
    std::vector<at::Tensor> grads(units);
    fsdp::GradientReducer reducer(
        groups, at::kFloat, [&grads](int64_t u) -> at::Tensor& { return grads[u]; }, [] {});
    const int64_t budget = fsdp::scatter_bytes(padded, shard_numel, shard, 4);
    reducer.set_budget(budget);
    for (int64_t u = 0; u < units; ++u) {
      reducer.reduce(u, unit_grad(u, padded), shard_numel, /*owned=*/true);
      EXPECT_LE(reducer.bytes_in_flight(), budget) << "shard " << shard << " unit " << u;
      if (u > 0) {
        EXPECT_TRUE(grads[u - 1].defined())
            << "shard " << shard << ": unit " << u - 1 << " not completed for unit " << u;
      }
    }
    reducer.finish();
    for (int64_t u = 0; u < units; ++u) {
      const auto want = unit_grad(u, padded).to(at::kFloat).narrow(0, 0, shard_numel) * (2 * shard);
      EXPECT_TRUE(grads[u].equal(want)) << "shard " << shard << " unit " << u;
    }
  }
}

// A chained all-reduce's lane wait completes nothing for the caller: test() still asks the device.
TEST(GradientReducer, ChainingDoesNotCompleteTheTrackedCollective) {
  DeferredDevice dev;
  DeferredGroup shard(dev, 2), replicate(dev, 2);
  const auto in = at::ones({8});
  const auto out = at::empty({4});
  auto scatter = shard.reduce_scatter_async(in, out);
  auto reduce = replicate.all_reduce_after_async(out, *scatter);
  EXPECT_FALSE(scatter->test()) << "chaining marked the reduce-scatter complete";
  EXPECT_FALSE(reduce->test());
  reduce->wait();  // runs the chain: the reduce-scatter first
  EXPECT_TRUE(scatter->test());
  EXPECT_TRUE(out.equal(at::full({4}, 4.0)));
}
