// The states a checkpoint holds (Stateful objects), and where this rank stands among the ranks
// that save and load them. Whoever builds the engine and the optimizer registers their states here
// (training_state.h); the file format sees only this list.
#pragma once
#include <mpi.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "shardtrain/ckpt/stateful.h"
#include "shardtrain/ckpt/values.h"

namespace shardtrain::ckpt {

struct Ranks {
  MPI_Comm world = MPI_COMM_WORLD;  // every rank: a load's failure is agreed over it
  MPI_Comm shard =
      MPI_COMM_WORLD;  // holds every byte of the tensors once: a load's CRCs are assembled over it
  bool writer = true;  // belongs to the replica that writes
  int shard_rank = 0;  // its place in the shard group: the writers' order
};

// What a save writes, taken at one moment: views of the live tensors, or host copies that a
// background write can use while training goes on.
struct Snapshot {
  std::vector<TensorGroup> groups;  // every state's, in registration order
  Values values;                    // every state's
  bool writer = true;
  int shard_rank = 0;
};

class StateRegistry {
 public:
  explicit StateRegistry(Ranks ranks = {}) : ranks_(ranks) {}
  // Throws Error when a state of that name is registered already.
  Stateful& add(std::unique_ptr<Stateful> state);
  template <typename T, typename... Args>
  T& emplace(Args&&... args) {
    return static_cast<T&>(add(std::make_unique<T>(std::forward<Args>(args)...)));
  }
  const Ranks& ranks() const { return ranks_; }
  std::vector<Stateful*> states() const;
  // Every state's tensors and values. copy: host copies of the tensors (GPU tensors are always
  // copied, since MPI-IO and the checksums read host memory). Throws Error when two states
  // claim the same group or attribute.
  Snapshot snapshot(bool copy) const;

 private:
  Ranks ranks_;
  std::vector<std::unique_ptr<Stateful>> states_;
};

}  // namespace shardtrain::ckpt
