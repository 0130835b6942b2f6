#include "shardtrain/model/generate.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <limits>
#include <memory>

#include "shardtrain/runtime/error.h"

namespace shardtrain::model {

const char* stop_reason_name(StopReason r) { return runtime::enum_name(kStopReasonNames, r); }

at::Tensor top_p_filter(const at::Tensor& logits, double top_p) {
  if (top_p >= 1.0) return logits;
  auto [sorted, idx] = logits.sort(/*dim=*/-1, /*descending=*/false);
  auto cum = sorted.softmax(-1).cumsum(-1);
  // Ascending order: drop the low tail whose mass stays within 1 - top_p; keep the top token.
  auto remove = cum.le(1.0 - top_p);
  remove.index_put_({-1}, false);
  auto mask = at::zeros_like(remove).scatter(-1, idx, remove);
  return logits.masked_fill(mask, -std::numeric_limits<float>::infinity());
}

at::Tensor top_k_filter(const at::Tensor& logits, int64_t top_k) {
  if (top_k <= 0 || top_k >= logits.size(-1)) return logits;
  const at::Tensor kth = std::get<0>(at::topk(logits, top_k)).select(-1, top_k - 1);
  return logits.masked_fill(logits.lt(kth), -std::numeric_limits<float>::infinity());
}

at::Tensor sampling_probs(const at::Tensor& logits, const GenerateConfig& cfg) {
  return top_p_filter(top_k_filter(logits / cfg.temperature, cfg.top_k), cfg.top_p).softmax(-1);
}

uint64_t row_seed(uint64_t seed, uint64_t sample) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (sample + 1);  // splitmix64
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

namespace {

bool ends_with(const std::vector<int32_t>& ids, const std::vector<int32_t>& tail) {
  return !tail.empty() && ids.size() >= tail.size() &&
         std::equal(tail.begin(), tail.end(), ids.end() - static_cast<std::ptrdiff_t>(tail.size()));
}

// One row still decoding.
struct Row {
  size_t prompt = 0;  // its index in the prompts
  int64_t next_pos = 0;
  at::Generator gen;
};

// Decodes prompts [first, last) as one batch into out.
// The rows' whole sequences so far (prompt and answer) prefilled into a new cache, left-padded so
// that every row's next token lands in the same slot: each row's last logits [rows, V].
at::Tensor prefill(const Decoder& model, const std::vector<std::vector<int32_t>>& prompts,
                   const std::vector<Completion>& out, std::vector<Row>& rows,
                   const GenerateConfig& cfg, std::unique_ptr<KvCache>& cache) {
  const auto B = static_cast<int64_t>(rows.size());
  const auto sequence = [&](const Row& row) {
    std::vector<int32_t> s = prompts[row.prompt];
    s.insert(s.end(), out[row.prompt].ids.begin(), out[row.prompt].ids.end());
    return s;
  };
  int64_t longest = 0, shortest = std::numeric_limits<int64_t>::max(), most_left = 0;
  for (const Row& row : rows) {
    const auto n = static_cast<int64_t>(sequence(row).size());
    longest = std::max(longest, n);
    shortest = std::min(shortest, n);
    most_left =
        std::max(most_left, cfg.max_new_tokens - static_cast<int64_t>(out[row.prompt].ids.size()));
  }
  at::Tensor tokens = at::zeros({B, longest}, at::kLong), positions = at::full({B, longest}, -1L);
  for (int64_t b = 0; b < B; ++b) {
    Row& row = rows[static_cast<size_t>(b)];
    const auto s = sequence(row);
    const auto pad = longest - static_cast<int64_t>(s.size());
    for (size_t j = 0; j < s.size(); ++j) {
      tokens[b][pad + static_cast<int64_t>(j)] = static_cast<int64_t>(s[j]);
      positions[b][pad + static_cast<int64_t>(j)] = static_cast<int64_t>(j);
    }
    row.next_pos = static_cast<int64_t>(s.size());
  }
  // The tokens a row feeds back after this: all it generates but the last, within the context.
  int64_t fed = most_left - 1;
  if (cfg.max_context > 0) fed = std::min(fed, cfg.max_context - 1 - shortest);
  cache = std::make_unique<KvCache>(model.cache(B, longest + std::max<int64_t>(fed, 0)));
  return model.step(tokens, positions, *cache).select(1, longest - 1);
}

// Decodes prompts [first, last) as one batch into out.
void decode_batch(const Decoder& model, const std::vector<std::vector<int32_t>>& prompts,
                  const std::vector<uint64_t>& seeds, const GenerateConfig& cfg, size_t first,
                  size_t last, std::vector<Completion>& out) {
  std::vector<Row> rows;
  for (size_t i = first; i < last; ++i)
    rows.push_back({i, 0, at::make_generator<at::CPUGeneratorImpl>(seeds[i])});
  std::unique_ptr<KvCache> cache;
  at::Tensor last_logits = prefill(model, prompts, out, rows, cfg, cache);  // [rows, V]
  while (!rows.empty()) {
    std::vector<int64_t> keep, next;
    for (size_t r = 0; r < rows.size(); ++r) {
      Row& row = rows[r];
      Completion& c = out[row.prompt];
      // Prompt and answer so far: a full context has no room for another token.
      const auto context = [&] {
        return static_cast<int64_t>(prompts[row.prompt].size() + c.ids.size());
      };
      const auto full = [&] { return cfg.max_context > 0 && context() >= cfg.max_context; };
      if (static_cast<int64_t>(c.ids.size()) >= cfg.max_new_tokens) {
        c.stop = StopReason::kLength;
        continue;
      }
      if (full()) {
        c.stop = StopReason::kContext;
        continue;
      }
      const at::Tensor logits = last_logits[static_cast<int64_t>(r)];
      const int64_t id =
          cfg.temperature <= 0
              ? logits.argmax().item<int64_t>()
              : at::multinomial(sampling_probs(logits, cfg), 1, false, row.gen).item<int64_t>();
      if (std::find(cfg.stop_ids.begin(), cfg.stop_ids.end(), id) != cfg.stop_ids.end()) {
        c.stop = StopReason::kEos;
        continue;
      }
      c.ids.push_back(static_cast<int32_t>(id));
      c.logprobs.push_back(at::log_softmax(logits, -1)[id].item<double>());
      const auto hit =
          std::find_if(cfg.stop_tokens.begin(), cfg.stop_tokens.end(),
                       [&](const std::vector<int32_t>& s) { return ends_with(c.ids, s); });
      if (hit != cfg.stop_tokens.end()) {  // the stop string is not part of the answer
        c.ids.resize(c.ids.size() - hit->size());
        c.logprobs.resize(c.ids.size());
        c.stop = StopReason::kStopString;
        continue;
      }
      if (static_cast<int64_t>(c.ids.size()) >= cfg.max_new_tokens) {  // no step for its last
        c.stop = StopReason::kLength;
        continue;
      }
      if (full()) {
        c.stop = StopReason::kContext;
        continue;
      }
      keep.push_back(static_cast<int64_t>(r));
      next.push_back(id);
    }
    if (keep.empty()) break;
    std::vector<Row> going;
    at::Tensor pos = at::empty({static_cast<int64_t>(keep.size()), 1}, at::kLong);
    for (size_t i = 0; i < keep.size(); ++i) {
      Row& row = rows[static_cast<size_t>(keep[i])];
      pos[static_cast<int64_t>(i)][0] = row.next_pos++;
      going.push_back(std::move(row));
    }
    rows = std::move(going);
    // longrope: a row whose context now passes the original one is computed again from its start
    // with the long factors, as transformers' Phi-3 drops its cache there; the batch with it.
    const int64_t after = model.long_rope_after();
    const bool switches =
        after > 0 && std::any_of(rows.begin(), rows.end(), [&](const Row& r) {
          return r.next_pos == after + 1;  // its newest token sits at position `after`
        });
    if (switches) {
      last_logits = prefill(model, prompts, out, rows, cfg, cache);
      continue;
    }
    if (keep.size() < static_cast<size_t>(cache->rows()))
      cache->keep_rows(at::tensor(keep, at::kLong));
    const at::Tensor step_tokens = at::tensor(next, at::kLong).unsqueeze(1);
    last_logits = model.step(step_tokens, pos, *cache).select(1, 0);
  }
}

}  // namespace

std::vector<Completion> generate(const Decoder& model,
                                 const std::vector<std::vector<int32_t>>& prompts,
                                 const std::vector<uint64_t>& seeds, const GenerateConfig& cfg) {
  if (seeds.size() != prompts.size()) throw runtime::Error("generate: one seed per prompt");
  for (const auto& p : prompts)
    if (p.empty())
      throw runtime::UsageError("generate needs a non-empty prompt (at least the BOS token)");
  c10::NoGradGuard no_grad;
  std::vector<Completion> out(prompts.size());
  const size_t batch = static_cast<size_t>(std::max<int64_t>(1, cfg.batch));
  for (size_t first = 0; first < prompts.size(); first += batch)
    decode_batch(model, prompts, seeds, cfg, first, std::min(prompts.size(), first + batch), out);
  return out;
}

}  // namespace shardtrain::model
