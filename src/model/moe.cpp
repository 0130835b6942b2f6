#include "shardtrain/model/moe.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <memory>

#if defined(SHARDTRAIN_TORCH_CUDA) && defined(SHARDTRAIN_HAVE_CUDA)
#include "shardtrain/cuda/cuda_handles.h"
#endif
#include "shardtrain/model/family.h"
#include "shardtrain/model/norm_activation.h"
#include "shardtrain/model/param_names.h"

namespace shardtrain::model {

std::string router_weight_name(const ModelConfig& cfg, int64_t layer) {
  return names::layer(layer,
                      (std::string(family(cfg.model_type).moe_block) + ".gate.weight").c_str());
}

std::string expert_weight_name(const ModelConfig& cfg, int64_t layer, int64_t expert,
                               ExpertProj p) {
  const Family& fam = family(cfg.model_type);
  const char* proj = p == ExpertProj::kGate ? fam.expert_gate
                     : p == ExpertProj::kUp ? fam.expert_up
                                            : fam.expert_down;
  const std::string local =
      std::string(fam.moe_block) + ".experts." + std::to_string(expert) + "." + proj + ".weight";
  return names::layer(layer, local.c_str());
}

std::vector<int64_t> expert_shape(const ModelConfig& cfg, ExpertProj p) {
  const int64_t h = cfg.hidden_size, i = cfg.expert_intermediate_size;
  return p == ExpertProj::kDown ? std::vector<int64_t>{h, i} : std::vector<int64_t>{i, h};
}

namespace {

struct AuxHolder : torch::CustomClassHolder {
  const RouterAux* aux = nullptr;
};

// The router's probabilities as they are, whose gradient gains the load-balancing loss's.
struct AuxTap : public torch::autograd::Function<AuxTap> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& probs,
                            const RouterAux* aux) {
    auto holder = c10::make_intrusive<AuxHolder>();
    holder->aux = aux;
    ctx->saved_data["aux"] = at::IValue::make_capsule(std::move(holder));
    return probs.clone();
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grad_out) {
    const RouterAux* aux = static_cast<AuxHolder*>(ctx->saved_data["aux"].toCapsule().get())->aux;
    at::Tensor g = grad_out[0];
    if (aux->grad.defined()) {
      at::Tensor add = aux->grad.to(g.scalar_type()).unsqueeze(0).expand(g.sizes());
      if (aux->valid.defined()) add = add * aux->valid.unsqueeze(1).to(g.scalar_type());
      g = g + add;
    }
    return {g, at::Tensor()};
  }
};

}  // namespace

at::Tensor RouterAux::finish(int64_t num_experts, double coef) {
  const at::Tensor rows = stats.narrow(0, 2 * num_experts, 1).clamp_min(1);
  const at::Tensor counts = stats.narrow(0, 0, num_experts) / rows;
  const at::Tensor probs = stats.narrow(0, num_experts, num_experts) / rows;
  grad = (counts * (coef * static_cast<double>(num_experts)) / rows).to(at::kFloat);
  return (counts * probs).sum() * static_cast<double>(num_experts);
}

Routing route(const ModelConfig& cfg, const at::Tensor& x, const at::Tensor& router,
              RouterAux* aux) {
  const at::Tensor logits = at::linear(x, router);  // [N, E] in the compute dtype
  at::Tensor probs = at::softmax(logits, -1, at::kFloat);
  if (aux) probs = AuxTap::apply(probs, aux);
  auto [top, experts] = at::topk(probs, cfg.experts_per_token, -1);
  if (aux && aux->record) {  // the pass's sums, of the tokens that count
    const int64_t E = cfg.num_experts;
    at::Tensor p = probs.detach().to(at::kDouble);
    at::Tensor chosen = at::one_hot(experts, E).sum(1).to(at::kDouble);  // [N, E]
    at::Tensor n = at::full({1}, static_cast<double>(x.size(0)), p.options());
    if (aux->valid.defined()) {
      const at::Tensor v = aux->valid.to(at::kDouble).unsqueeze(1);
      p = p * v;
      chosen = chosen * v;
      n = aux->valid.sum().to(at::kDouble).reshape({1});
    }
    aux->stats += at::cat({chosen.sum(0), p.sum(0), n});
  }
  if (cfg.norm_topk_prob) top = top / top.sum(-1, /*keepdim=*/true);
  if (family(cfg.model_type).routing_in_dtype) top = top.to(logits.scalar_type());
  return {top, experts};
}

ExpertSlots expert_slots(const at::Tensor& experts, int64_t num_experts) {
  ExpertSlots s;
  const at::Tensor flat = experts.reshape({-1});
  // Stable: within an expert the pairs keep their token order.
  s.pairs = std::get<1>(at::sort(flat, /*stable=*/true, /*dim=*/0, /*descending=*/false));
  s.tokens = at::floor_divide(s.pairs, experts.size(1));
  const at::Tensor counts = at::bincount(flat, {}, num_experts).to(at::kCPU, at::kLong);
  s.counts.assign(counts.data_ptr<int64_t>(), counts.data_ptr<int64_t>() + num_experts);
  return s;
}

bool grouped_experts_available(const at::Tensor& x) {
#if defined(SHARDTRAIN_TORCH_CUDA) && defined(SHARDTRAIN_HAVE_CUDA)
  if (!x.is_cuda() || x.scalar_type() != at::kBFloat16) return false;
  return cuda::device_info(x.get_device()).major >= 9;
#else
  (void)x;
  return false;
#endif
}

namespace {

// Each expert's gated MLP over its run of `sorted` (counts: the runs of w's experts, in order):
// one matmul per expert and projection.
at::Tensor experts_loop(const ModelConfig& cfg, const MoeWeights& w, const at::Tensor& sorted,
                        const std::vector<int64_t>& counts) {
  std::vector<at::Tensor> outs;
  int64_t at_slot = 0;
  for (size_t e = 0; e < counts.size(); ++e) {
    const int64_t n = counts[e];
    if (n == 0) continue;  // an expert no token chose computes nothing, as in transformers
    const at::Tensor in = sorted.narrow(0, at_slot, n);
    const at::Tensor h =
        activation(cfg.hidden_act, at::linear(in, w.gate[e])) * at::linear(in, w.up[e]);
    outs.push_back(at::linear(h, w.down[e]));
    at_slot += n;
  }
  return outs.empty() ? sorted.narrow(0, 0, 0) : at::cat(outs);
}

// The same as one grouped GEMM per projection: the runs end at the counts' running sums.
at::Tensor experts_grouped(const ModelConfig& cfg, const MoeWeights& w, const at::Tensor& sorted,
                           const std::vector<int64_t>& counts) {
  std::vector<int32_t> ends;
  int64_t total = 0;
  for (const int64_t n : counts) ends.push_back(static_cast<int32_t>(total += n));
  const at::Tensor offs = at::tensor(ends, at::kInt).to(sorted.device());
  // [E, in, out]: each expert's x @ W^T as the grouped GEMM's right operand.
  auto stacked = [](const std::vector<at::Tensor>& ws) { return at::stack(ws).transpose(1, 2); };
  const at::Tensor h = activation(cfg.hidden_act, at::_grouped_mm(sorted, stacked(w.gate), offs)) *
                       at::_grouped_mm(sorted, stacked(w.up), offs);
  return at::_grouped_mm(h, stacked(w.down), offs);
}

at::Tensor run_experts(const ModelConfig& cfg, const MoeWeights& w, const at::Tensor& sorted,
                       const std::vector<int64_t>& counts, bool grouped) {
  return grouped ? experts_grouped(cfg, w, sorted, counts) : experts_loop(cfg, w, sorted, counts);
}

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

struct GroupHolder : torch::CustomClassHolder {
  const ExpertGroup* group = nullptr;
};

// The all-to-all and, in backward, the same with the counts swapped. The group outlives the
// graph: it is the pass's layout's, kept until the pass's backward is done.
struct ExchangeRows : public torch::autograd::Function<ExchangeRows> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& send, const ExpertGroup* group,
                            const std::vector<int64_t>& send_rows,
                            const std::vector<int64_t>& recv_rows) {
    auto holder = c10::make_intrusive<GroupHolder>();
    holder->group = group;
    ctx->saved_data["group"] = at::IValue::make_capsule(std::move(holder));
    ctx->saved_data["send_rows"] = send_rows;
    ctx->saved_data["recv_rows"] = recv_rows;
    return exchange(*group, send.contiguous(), send_rows, recv_rows);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grad_out) {
    const auto* group =
        static_cast<GroupHolder*>(ctx->saved_data["group"].toCapsule().get())->group;
    const auto send_rows = ctx->saved_data["send_rows"].toIntVector();
    const auto recv_rows = ctx->saved_data["recv_rows"].toIntVector();
    return {exchange(*group, grad_out[0].contiguous(), recv_rows, send_rows), at::Tensor(),
            at::Tensor(), at::Tensor()};
  }
  static at::Tensor exchange(const ExpertGroup& group, const at::Tensor& send,
                             const std::vector<int64_t>& send_rows,
                             const std::vector<int64_t>& recv_rows) {
    int64_t rows = 0;
    for (const int64_t r : recv_rows) rows += r;
    std::vector<int64_t> shape = send.sizes().vec();
    shape[0] = rows;
    at::Tensor recv = at::empty(shape, send.options());
    group.exchange(send, send_rows, recv, recv_rows);
    return recv;
  }
};

// The inverse of a permutation given as an index tensor.
at::Tensor inverse_permutation(const at::Tensor& perm) {
  return at::empty_like(perm).scatter_(0, perm, at::arange(perm.size(0), perm.options()));
}

// The experts' outputs for the rows `sorted` (by global expert, counts [E]) when the experts are
// split over the group: the rows go to their experts' ranks, are regrouped by local expert, run,
// and come back in the order they left.
at::Tensor remote_experts(const ModelConfig& cfg, const MoeWeights& w, const at::Tensor& sorted,
                          const std::vector<int64_t>& counts, const ExpertGroup& g, bool grouped) {
  const int64_t local = g.local(cfg);
  // The counts first: each rank learns how many rows each source sends to each of its experts.
  const at::Tensor mine = at::tensor(counts, at::kLong).view({g.size, local}).to(sorted.device());
  at::Tensor theirs = at::empty_like(mine);
  const std::vector<int64_t> ones(static_cast<size_t>(g.size), 1);
  g.exchange(mine, ones, theirs, ones);
  theirs = theirs.to(at::kCPU).contiguous();
  const std::vector<int64_t> received(theirs.data_ptr<int64_t>(),
                                      theirs.data_ptr<int64_t>() + theirs.numel());
  const ExpertRoute route = expert_route(counts, received, g.size);
  const at::Tensor arrived = exchange_rows(g, sorted, route.send_rows, route.recv_rows);
  const at::Tensor order = at::tensor(route.by_expert, at::kLong).to(sorted.device());
  const at::Tensor y =
      run_experts(cfg, w, arrived.index_select(0, order), route.local_counts, grouped);
  return exchange_rows(g, y.index_select(0, inverse_permutation(order)), route.recv_rows,
                       route.send_rows);
}

}  // namespace

ExpertRoute expert_route(const std::vector<int64_t>& counts, const std::vector<int64_t>& received,
                         int size) {
  const auto n = static_cast<size_t>(size);
  const size_t local = counts.size() / n;
  ExpertRoute r;
  r.send_rows.assign(n, 0);
  r.recv_rows.assign(n, 0);
  r.local_counts.assign(local, 0);
  for (size_t e = 0; e < counts.size(); ++e) r.send_rows[e / local] += counts[e];
  std::vector<int64_t> start(n * local);  // where source s's rows for local expert e arrive
  int64_t at = 0;
  for (size_t s = 0; s < n; ++s)
    for (size_t e = 0; e < local; ++e) {
      start[s * local + e] = at;
      at += received[s * local + e];
      r.recv_rows[s] += received[s * local + e];
      r.local_counts[e] += received[s * local + e];
    }
  for (size_t e = 0; e < local; ++e)
    for (size_t s = 0; s < n; ++s)
      for (int64_t i = 0; i < received[s * local + e]; ++i)
        r.by_expert.push_back(start[s * local + e] + i);
  return r;
}

at::Tensor exchange_rows(const ExpertGroup& group, const at::Tensor& send,
                         const std::vector<int64_t>& send_rows,
                         const std::vector<int64_t>& recv_rows) {
  return ExchangeRows::apply(send, &group, send_rows, recv_rows);
}

MoeWeights moe_weights(const ModelConfig& cfg, const WeightLookup& w, int64_t layer,
                       const ExpertGroup* group) {
  MoeWeights m;
  m.router = w(router_weight_name(cfg, layer));
  m.first_expert = group ? group->first(cfg) : 0;
  const int64_t count = group ? group->local(cfg) : cfg.num_experts;
  for (int64_t e = m.first_expert; e < m.first_expert + count; ++e) {
    m.gate.push_back(w(expert_weight_name(cfg, layer, e, ExpertProj::kGate)));
    m.up.push_back(w(expert_weight_name(cfg, layer, e, ExpertProj::kUp)));
    m.down.push_back(w(expert_weight_name(cfg, layer, e, ExpertProj::kDown)));
  }
  return m;
}

at::Tensor serve_experts(const ModelConfig& cfg, const MoeWeights& w, const ExpertGroup& group,
                         const at::TensorOptions& options) {
  // An input that takes a gradient, so the exchanges have backward nodes as the others' do.
  const at::Tensor none = at::zeros({0, 1, cfg.hidden_size}, options).requires_grad_(true);
  return moe_mlp(cfg, w, none, ExpertsPath::kAuto, &group);
}

at::Tensor moe_mlp(const ModelConfig& cfg, const MoeWeights& w, const at::Tensor& x,
                   ExpertsPath path, const ExpertGroup* group, RouterAux* aux) {
  const at::Tensor x2 = x.reshape({-1, x.size(-1)});
  const Routing r = route(cfg, x2, w.router, aux);
  const ExpertSlots slots = expert_slots(r.experts, cfg.num_experts);
  const at::Tensor sorted = x2.index_select(0, slots.tokens);  // [N * k, hidden], by expert
  const bool grouped =
      path == ExpertsPath::kGrouped || (path == ExpertsPath::kAuto && grouped_experts_available(x));
  const at::Tensor y = group && group->size > 1
                           ? remote_experts(cfg, w, sorted, slots.counts, *group, grouped)
                           : run_experts(cfg, w, sorted, slots.counts, grouped);
  const at::Tensor weight = r.weights.reshape({-1}).index_select(0, slots.pairs).unsqueeze(1);
  // Mixtral multiplies in fp32 and rounds the product; Qwen3-MoE's weights are rounded already.
  const at::Tensor weighted = (y * weight).to(x.scalar_type());
  // Back to (token, choice) order and summed over the choices: index_add would keep its source
  // for backward, this keeps only the permutation.
  const at::Tensor back =
      at::empty_like(slots.pairs)
          .scatter_(0, slots.pairs, at::arange(slots.pairs.size(0), slots.pairs.options()));
  return weighted.index_select(0, back)
      .view({x2.size(0), cfg.experts_per_token, x2.size(1)})
      .sum(1)
      .view(x.sizes());
}

}  // namespace shardtrain::model
