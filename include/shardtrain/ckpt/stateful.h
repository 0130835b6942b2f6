// One named part of the training state that a checkpoint saves and restores, in the spirit of
// torch.distributed.checkpoint.Stateful. A state contributes sharded fp32 tensors (each a
// dataset in its own HDF5 group, written by every rank's slices), small values (root
// attributes), or both. The file format asks every registered state for its tensors and values on a
// save and hands each its own back on a load, so a new state needs no change to the format.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "shardtrain/ckpt/values.h"
#include "shardtrain/runtime/error.h"

namespace shardtrain::ckpt {

// One dataset of a tensor group: the same list, in the same order, on every rank.
struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;  // logical shape, 1-D or 2-D
  int64_t numel() const;
};

// This rank's part of one dataset: the row-major flat range [offset, offset + numel).
struct TensorSlice {
  std::string name;  // a TensorSpec's name
  int64_t offset = 0;
  int64_t numel = 0;
  at::Tensor
      data;  // [numel] fp32: a view of the live state (a load writes into it), or a host copy
};

// An HDF5 group of datasets, each with a "crc32" attribute.
struct TensorGroup {
  std::string group;
  std::vector<TensorSpec> datasets;
  std::vector<TensorSlice> slices;  // at most one per dataset; none where this rank holds nothing
};

// A checkpoint this run must not continue from (another model, other adapter settings or another
// base). --resume auto does not fall back to an older checkpoint, which would be just as wrong.
class ResumeRefused : public runtime::AgreedUsageError {
 public:
  using runtime::AgreedUsageError::AgreedUsageError;
};

class Stateful {
 public:
  virtual ~Stateful() = default;
  // Unique among the registered states; errors about its tensors and values name it.
  virtual std::string name() const = 0;
  // Views of the live tensors: a save reads them (or copies them for a background write), a load
  // writes into them. Group names must be unique across states.
  virtual std::vector<TensorGroup> tensors() { return {}; }
  // Adds this state's values, taken now: a background save writes them later.
  virtual void save_values(Values& out) const { (void)out; }
  // Before any tensor is read: throws ResumeRefused for a checkpoint this run cannot continue.
  virtual void check(const Values& saved) const { (void)saved; }
  // After every tensor is read: takes this state's values back. A missing attribute throws
  // Error naming the state, unless the state asks has() and documents a default.
  virtual void load_values(const Values& saved) { (void)saved; }
};

}  // namespace shardtrain::ckpt
