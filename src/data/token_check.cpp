#include "shardtrain/data/token_check.h"

#include <mpi.h>

#include <climits>
#include <cstdio>

#include "shardtrain/data/sampler.h"
#include "shardtrain/runtime/agreement.h"
#include "shardtrain/runtime/clock.h"
#include "shardtrain/runtime/counted.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/logging.h"

namespace shardtrain::data {

namespace {

std::string local_token_check(const char* opt, const TokenFile& f, const model::ModelConfig& model,
                              const runtime::MpiEnv& env, int64_t* bad_row, int64_t* loss_tokens) {
  const std::string name = std::string(opt) + " " + f.path();
  if (f.seq_len() > model.max_position_embeddings)
    return name + " has rows of " + std::to_string(f.seq_len()) +
           " tokens, more than the model's max_position_embeddings " +
           std::to_string(model.max_position_embeddings) +
           "; re-run prepare with a smaller --seq-len";
  const int64_t tok_vocab = f.meta().tokenizer_vocab_size;
  if (tok_vocab > model.vocab_size)
    return name + " was tokenized with a " + std::to_string(tok_vocab) +
           "-piece tokenizer but the model's vocab_size is " + std::to_string(model.vocab_size) +
           "; prepare the data with the model's own tokenizer";
  const auto [begin, end] = balanced_part(f.rows(), env.size(), env.rank());
  try {
    const auto scan = f.scan(model.vocab_size, begin, end);
    *bad_row = scan.outside.row;
    *loss_tokens = scan.loss_tokens;
  } catch (const runtime::UsageError& e) {
    return std::string(opt) + " " + e.what();
  }
  return "";
}

// Collective: sums the loss tokens the scan counted on each rank (the loss_tokens attribute is not
// trusted). None is refused: the run would learn nothing. Under 1% warns: likely not what was
// meant.
void check_loss_share(const char* opt, const TokenFile& f, int64_t loss_tokens) {
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &loss_tokens, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD));
  const int64_t tokens = f.rows() * f.seq_len();
  const std::string name = std::string(opt) + " " + f.path();
  if (loss_tokens == 0)
    throw runtime::AgreedUsageError(
        name +
        " holds no token in the loss (every row's loss_mask is 0): training on it learns "
        "nothing; re-run prepare (with the right --format and a --seq-len that keeps the answers)");
  if (loss_tokens * 100 < tokens) {
    char share[32];
    std::snprintf(share, sizeof share, "%.2f%%",
                  100.0 * static_cast<double>(loss_tokens) / static_cast<double>(tokens));
    runtime::log::warn_once(
        name + ": only " + share + " of its tokens (" + std::to_string(loss_tokens) + " of " +
        std::to_string(tokens) +
        ") are in the loss (loss_mask 1), so most of the compute goes to tokens "
        "that are not; if that is not meant, re-run prepare with --train-on all, --mode packing or "
        "a "
        "smaller --seq-len, or fix its loss_mask");
  }
}

}  // namespace

std::unique_ptr<TokenFile> open_token_file(const char* opt, const std::string& path,
                                           const model::ModelConfig& model,
                                           const runtime::MpiEnv& env, std::string* checked) {
  const runtime::Stopwatch clock;
  std::unique_ptr<TokenFile> f;
  std::string failure;
  int64_t bad_row = -1, loss_tokens = 0;
  try {
    f = std::make_unique<TokenFile>(path);
    failure = local_token_check(opt, *f, model, env, &bad_row, &loss_tokens);
  } catch (const runtime::UsageError& e) {
    failure = std::string(opt) + " " + e.what();
  }
  if (const std::string agreed = runtime::agreed_failure(failure); !agreed.empty())
    throw runtime::AgreedUsageError(agreed);
  int64_t first =
      bad_row < 0 ? INT64_MAX : bad_row;  // the file's first bad row, wherever it was found
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD));
  if (first == INT64_MAX) {
    check_loss_share(opt, *f, loss_tokens);
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.2f", clock.seconds());
    const std::string line = "checked the " + std::to_string(f->rows() * f->seq_len()) +
                             " token ids of " + path + " against vocab_size " +
                             std::to_string(model.vocab_size) + " in " + secs + " s (" +
                             runtime::counted(env.size(), "rank") + ")";
    if (checked)
      *checked = line;
    else
      runtime::log::info(line);
    return f;
  }
  const auto at =
      f->first_token_outside(model.vocab_size, first, first + 1);  // every rank: the same one row
  throw runtime::AgreedUsageError(
      std::string(opt) + " " + path + ": row " + std::to_string(at.row) + " holds token id " +
      std::to_string(at.token) + " at position " + std::to_string(at.column) +
      ", outside the model's vocabulary [0, " + std::to_string(model.vocab_size) +
      "); prepare the data with the model's tokenizer or use a model whose vocab_size covers it");
}

}  // namespace shardtrain::data
