// The validator component: loss and perplexity on a token file, and exact-match accuracy by
// greedy generation on prompt/answer records, both through the FSDP engine at any world size.
// train runs it every --val-every steps and at the end; eval runs it once.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "shardtrain/data/instruction.h"
#include "shardtrain/data/token_file.h"
#include "shardtrain/data/tokenizer.h"
#include "shardtrain/fsdp/engine.h"
#include "shardtrain/model/generate.h"
#include "shardtrain/train/accuracy.h"
#include "shardtrain/train/dpo_objective.h"
#include "shardtrain/train/metrics.h"

namespace shardtrain::train {

struct EvalResult {
  double loss = 0;
  double perplexity = 0;
  int64_t tokens = 0;
};

// Each of the first max_batches batches of batch_size rows (pairs, in a preference file) in file
// order (all when <= 0), this rank's part of it (rank and world: the data-parallel position).
// Every rank runs every batch, even an empty part (a sharded forward is collective).
void for_each_batch(const data::TokenFile& data, int64_t batch_size, int64_t max_batches, int rank,
                    int world, const std::function<void(const model::Batch&)>& fn);

// Forward-only loss over a token file, its batches read as for_each_batch reads them; `sum_all`
// totals across ranks (none: one rank). A batch's loss: summed over its loss tokens, and their
// count, its tokens at their positions (packed documents attend within themselves).
using BatchLossFn = std::function<model::LossSum(const model::Batch& batch)>;
EvalResult evaluate_loss(const data::TokenFile& data, int64_t batch_size, int64_t max_batches,
                         int rank, int world, const BatchLossFn& loss,
                         const std::function<double(double)>& sum_all = {});

// DPO's metrics over a preference file's pairs, forward only, as evaluate_loss reads batches
// (batch_size pairs). stats: a batch's sums (model::preference_loss's).
using BatchStatsFn = std::function<at::Tensor(const model::Batch& batch)>;
model::PreferenceMetrics evaluate_preference(const data::TokenFile& data, int64_t batch_size,
                                             int64_t max_batches, int rank, int world,
                                             const BatchStatsFn& stats,
                                             const std::function<double(double)>& sum_all = {});

// --accuracy-file and its companions (train's validation, and eval).
struct AccuracyConfig {
  std::string file, tokenizer;
  data::DataFormat format = data::DataFormat::kAuto;
  int64_t samples = 100, max_new_tokens = 32;
};

// The exact-match task: its tokenizer and records, loaded and checked once, before training.
struct AccuracyTask {
  data::Tokenizer tokenizer;
  std::vector<data::Record> records;
  int64_t max_new_tokens;
  AccuracyResult run(const model::Decoder& model) const {
    return exact_match(model, tokenizer, records, max_new_tokens,
                       model.config().max_position_embeddings);
  }
};
std::unique_ptr<AccuracyTask> load_accuracy_task(const AccuracyConfig& cfg,
                                                 const model::ModelConfig& model);  // null: no file

class Validator {
 public:
  // val and accuracy may be null. every: validate every N steps (0: at the end only).
  Validator(fsdp::FsdpEngine& engine, comm::ParallelDims& dims, const data::TokenFile* val,
            const AccuracyTask* accuracy, int64_t batch_size, int64_t max_batches,
            int64_t every = 0);
  bool has_loss() const { return val_ != nullptr; }
  bool has_accuracy() const { return accuracy_ != nullptr; }
  bool due(int64_t step, bool last) const { return last || (every_ > 0 && step % every_ == 0); }
  EvalResult loss();                      // collective
  model::PreferenceMetrics preference();  // collective: DPO's, on the validation pairs
  // DPO: the held-out pairs are validated against this objective's reference (its validation one).
  void set_dpo(std::unique_ptr<DpoObjective> dpo) { dpo_ = std::move(dpo); }
  // Collective: the model gathered once, then every rank decodes every record on its own.
  AccuracyResult accuracy();
  void run(StepMetrics& m);  // collective: whatever is configured, into m

 private:
  fsdp::FsdpEngine& engine_;
  comm::ParallelDims& dims_;
  const data::TokenFile* val_;
  const AccuracyTask* accuracy_;
  int64_t batch_size_, max_batches_, every_;
  std::unique_ptr<DpoObjective> dpo_;  // set: DPO's validation; else the next-token loss
};

}  // namespace shardtrain::train
