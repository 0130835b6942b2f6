#include "shardtrain/comm/communicator.h"

#include <ATen/ATen.h>

#include "shardtrain/runtime/error.h"

namespace shardtrain::comm {

const char* op_name(Op op) {
  static const char* names[kNumOps] = {"all_gather", "reduce_scatter", "all_reduce", "broadcast", "barrier"};
  return names[static_cast<int>(op)];
}

double Communicator::all_reduce_sum(double v) {
  auto t = at::full({1}, v, at::kDouble);
  all_reduce(t);
  return t.item<double>();
}

namespace {
void check_flat(const char* what, const at::Tensor& t) {
  if (!t.is_contiguous()) throw Error(std::string(what) + ": buffers must be contiguous");
}
}  // namespace

void check_all_gather(const Communicator& c, const at::Tensor& in, const at::Tensor& out) {
  check_flat("all_gather", in), check_flat("all_gather", out);
  if (out.numel() != in.numel() * c.size() || in.scalar_type() != out.scalar_type())
    throw Error("all_gather on " + c.name() + ": output must hold size x input elements of the same dtype");
}

void check_reduce_scatter(const Communicator& c, const at::Tensor& in, const at::Tensor& out) {
  check_flat("reduce_scatter", in), check_flat("reduce_scatter", out);
  if (in.numel() != out.numel() * c.size() || in.scalar_type() != out.scalar_type())
    throw Error("reduce_scatter on " + c.name() + ": input must hold size x output elements of the same dtype");
}

}  // namespace shardtrain::comm
