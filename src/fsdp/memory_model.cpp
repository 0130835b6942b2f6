#include "shardtrain/fsdp/memory_model.h"

#include <algorithm>
#include <deque>

#include "shardtrain/fsdp/flat_layout.h"
#include "shardtrain/fsdp/gradient_reducer.h"
#include "shardtrain/model/lm_loss.h"

namespace shardtrain::fsdp {

int64_t reduce_budget(const std::vector<UnitSize>& trainable, int shard_size, int reduce_elt) {
  int64_t most = 0;
  for (const UnitSize& u : trainable)
    if (u.numel > 0)
      most = std::max(most, scatter_bytes(u.padded, u.shard_numel, shard_size, reduce_elt));
  return most;
}

MemoryReport persistent_bytes(const TrainingSizes& sizes, bool no_sync, int param_elt,
                              bool cpu_offload) {
  MemoryReport p;
  int64_t full = 0, base = 0;
  for (size_t i = 0; i < sizes.base.size(); ++i) {
    const UnitSize& u = sizes.trainable(i);
    if (cpu_offload) {
      p.host_bytes += offloaded_bytes_per_element(param_elt) * u.shard_numel;
    } else {
      p.param_bytes += 4 * u.shard_numel;
      p.grad_bytes += 4 * u.shard_numel;
      p.optimizer_bytes += 8 * u.shard_numel;
    }
    p.padding_elements += u.padded - u.numel;
    full += u.numel;
    if (no_sync) p.no_sync_bytes += 4 * u.padded;
    if (sizes.base_frozen()) {
      p.base_bytes += static_cast<int64_t>(param_elt) * sizes.base[i].shard_numel;
      base += sizes.base[i].numel;
    }
  }
  p.unsharded_bytes = 16 * full + base * param_elt;
  return p;
}

namespace {

// The engine's state during the walk, and the peaks seen at the points where it notes memory.
struct Walk {
  const TrainingSizes& sizes;
  const std::vector<UnitSize>& base;
  const StepShape& s;
  int64_t persistent;
  std::vector<bool> gathered, grad;
  std::deque<int64_t> pending;  // units whose reduction is in flight, oldest first
  int64_t tied_grad =
      0;  // a tied embedding's leaf gradient, from the head's backward to the embedding's
  int64_t held = 0;  // the batch's layout (ActivationBytes::step_held), once the forward starts
  StepPeak peak;

  std::vector<bool> runs_backward;  // the engine skips the others' backward (a frozen embedding)
  const UnitSize& trainable(int64_t u) const { return sizes.trainable(u); }
  int64_t budget = 0;  // reduce_budget(): the reduce-scatter bytes allowed in flight
  bool offload = false;
  std::vector<bool> staging;    // offload: gathers in flight, their shards copied from the host
  std::deque<int64_t> to_host;  // offload: gradient shards on the device, oldest first
  int64_t scatter(int64_t u) const {
    return scatter_bytes(trainable(u).padded, trainable(u).shard_numel, s.shard_size, s.reduce_elt);
  }
  void gather(int64_t u, bool backward) {
    if (u < 0 || u >= static_cast<int64_t>(base.size())) return;
    if (backward && !runs_backward[u]) return;
    // Offload: a unit gathered anew copies its shard from the host first (over one rank the
    // copy is the unit itself).
    if (offload && !gathered[u] && s.shard_size > 1) staging[u] = true;
    gathered[u] = true;
  }
  void note(int64_t activations) {
    int64_t g = 0, r = 0, gs = 0, st = 0;
    int n = 0;
    for (size_t u = 0; u < base.size(); ++u) {
      if (gathered[u]) {
        g += gathered_bytes(sizes.gathered_numel(u), s.param_elt);
        ++n;
      }
      if (grad[u]) gs += 4 * trainable(static_cast<int64_t>(u)).shard_numel;
      if (staging[u]) st += trainable(static_cast<int64_t>(u)).shard_numel * s.param_elt;
    }
    for (const int64_t u : pending) r += scatter(u);
    const int64_t engine = persistent + g + r + gs + st;
    activations +=
        tied_grad +
        held;  // autograd's and the layout's, like the activations: not in the engine's own count
    peak.engine_bytes = std::max(peak.engine_bytes, engine);
    peak.gathered_units = std::max(peak.gathered_units, n);
    if (engine + activations > peak.total_bytes) {
      peak.total_bytes = engine + activations;
      peak.persistent = persistent;
      peak.gathered = g;
      peak.reductions = r;
      peak.grad_shards = gs;
      peak.activations = activations;
      peak.staging = st;
    }
  }
  // The unit about to compute waited for its gather: its staging copy is gone.
  void computing(int64_t u) {
    if (u >= 0 && u < static_cast<int64_t>(staging.size())) staging[u] = false;
  }
  // The gathers issued beside a unit's compute complete during it: their staging goes.
  void gathers_done() { std::fill(staging.begin(), staging.end(), false); }
  void advance_oldest(int64_t activations) {
    const int64_t u = pending.front();
    grad[u] = true;  // a hybrid reduction's all-reduce finishes first: no extra buffer
    if (offload) {   // copied to the host behind the next reduction: two on the device at most
      to_host.push_back(u);
      if (to_host.size() > 2) {
        grad[to_host.front()] = false;
        to_host.pop_front();
      }
    }
    note(activations);
    pending.pop_front();
  }
  void reduce(int64_t u,
              int64_t activations) {  // GradientReducer::reduce: the oldest complete first
    std::vector<int64_t> in_flight;
    for (const int64_t p : pending) in_flight.push_back(scatter(p));
    for (size_t n = reductions_to_complete(in_flight, scatter(u), budget); n > 0; --n)
      advance_oldest(activations);
    pending.push_back(u);
    note(activations);
  }
};

}  // namespace

StepPeak step_peak(const TrainingSizes& sizes, const ShardingConfig& cfg, const StepShape& s,
                   const model::ActivationBytes& act, int64_t persistent) {
  const std::vector<UnitSize>& base = sizes.base;
  const int64_t U = static_cast<int64_t>(base.size());
  const int64_t tokens = s.micro_batch_rows * s.seq_len;
  const int64_t fused_chunk = s.head_chunk;  // 0: unfused
  Walk w{sizes, base, s,  persistent, std::vector<bool>(U), std::vector<bool>(U),
         {},    {},   {}, {},         runs_backward(sizes)};
  w.offload = cfg.cpu_offload;
  w.staging.assign(U, false);
  const bool reshard = reshard_after_forward(cfg.sharding);
  const int ahead = cfg.prefetch ? cfg.max_inflight_gathers - 1 : 0;
  const auto is_layer = [&](int64_t u) { return base[u].kind == model::UnitKind::kDecoderLayer; };
  const auto base_layer = [](int64_t u) {
    return u - 1;
  };  // model_units(): the embedding, then the layers
  // What autograd keeps of unit u after its forward, per token.
  const auto kept = [&](int64_t u) -> int64_t {
    if (!is_layer(u)) return base[u].kind == model::UnitKind::kHead ? act.head : 0;
    return layer_kept(cfg.activation_checkpointing, act, base_layer(u));
  };
  w.budget = reduce_budget(sizes.trainable_units(), s.shard_size, s.reduce_elt);
  w.note(0);
  w.held = act.step_held * tokens;
  for (int64_t mb = 0; mb < s.grad_accum; ++mb) {
    int64_t stored = 0;  // per token
    for (int64_t u = 0; u < U; ++u) {
      w.gather(u, false);
      for (int k = 1; k <= ahead; ++k) w.gather(u + k, false);
      const bool head = base[u].kind == model::UnitKind::kHead;
      if (head && s.tied_embedding) w.gather(0, false);
      w.computing(u);
      if (head && s.tied_embedding) w.computing(0);
      w.note(stored * tokens);
      w.gathers_done();
      stored += kept(u);
      if (reshard && !head) w.gathered[u] = false;
    }
    for (int64_t u = U - 1; u >= 0; --u) {
      w.gather(u, true);
      const bool tied_head = s.tied_embedding && base[u].kind == model::UnitKind::kHead;
      if (tied_head) w.gathered[0] = true;
      for (int k = 1; k <= ahead; ++k) w.gather(u - k, true);
      w.computing(u);
      const bool frozen = !sizes.trains(u);  // nothing here trains: nothing to reduce
      int64_t working = 0;  // per token, on top of what is stored, while u's backward runs
      if (base[u].kind == model::UnitKind::kHead)
        working = act.logits_loss;
      else if (is_layer(u))
        working = layer_working(cfg.activation_checkpointing, act, base_layer(u));
      const int64_t leaf_grad =
          frozen ? 0 : w.trainable(u).padded * s.param_elt;  // before the reduction converts it
      // The head's weight gradient appears after the loss's logit gradients are freed; a layer's
      // weight gradients build up while its backward runs.
      const bool head = base[u].kind == model::UnitKind::kHead;
      if (head && fused_chunk > 0) {
        // fp32: the accumulator is the weight gradient, then the unit's gradient is made from it;
        // bf16: each chunk's [V, H] product and the cast of the accumulator sit beside it.
        // A frozen head (adapters beside it) gets no weight gradient at all.
        const int64_t acc = frozen ? 0 : act.fused_fixed;
        const int64_t product =
            frozen || s.param_elt == 4 ? 0 : act.vocab * act.hidden * s.param_elt;
        w.note(stored * tokens + tokens * act.fused_token + acc + product +
               std::max(fused_chunk * act.fused_chunk, s.param_elt == 4 ? leaf_grad : 0));
      } else {
        w.note(stored * tokens +
               (head ? std::max(working * tokens, leaf_grad) : working * tokens + leaf_grad));
      }
      w.gathers_done();
      stored -= kept(u);
      if (!frozen && !cfg.no_sync_accumulation) w.reduce(u, stored * tokens);
      w.gathered[u] = false;
      if (tied_head && !sizes.base_frozen()) w.tied_grad = base[0].padded * s.param_elt;
      if (tied_head && reshard) w.gathered[0] = false;
      if (u == 0) w.tied_grad = 0;
    }
  }
  if (cfg.no_sync_accumulation)
    for (int64_t u = 0; u < U; ++u)
      if (sizes.trains(u)) w.reduce(u, 0);
  while (!w.pending.empty()) w.advance_oldest(0);
  return w.peak;
}

}  // namespace shardtrain::fsdp
