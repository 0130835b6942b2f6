#include "shardtrain/cli/run_checks.h"

#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "shardtrain/cli/commands.h"
#include "shardtrain/data/sampler.h"
#include "shardtrain/runtime/clock.h"
#include "shardtrain/runtime/counted.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/logging.h"

namespace fs = std::filesystem;

namespace shardtrain::cli {

void check_fp8(const model::ModelConfig& model, const model::RunPlan& run,
               const fsdp::ShardingConfig& cfg, const runtime::MpiEnv& env) {
  if (run.fp8 == model::Fp8Mode::kOff) return;
  const std::string opt = std::string("--fp8 ") + model::fp8_mode_name(run.fp8) + ": ";
  if (const std::string p = model::fp8_shape_problem(model); !p.empty())
    throw runtime::AgreedUsageError(opt + p + "; or run without --fp8");
  // Each rank asks about its own GPU (a mixed allocation differs): the first refusal is all's.
  const DeviceChoice d = choose_device(cfg.device, env);
  const std::string mine = model::fp8_device_problem(
      d.cuda ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(d.index))
             : at::Device(at::kCPU));
  const std::string agreed =
      agreed_failure(mine.empty() ? "" : opt + mine + "; or run without --fp8");
  if (!agreed.empty()) throw runtime::AgreedUsageError(agreed);
  if (run.fp8 == model::Fp8Mode::kRowwise && cfg.param_dtype == at::kFloat)
    throw runtime::AgreedUsageError(
        opt + "rowwise float8 GEMMs write bf16 only; use --param-dtype bf16 (or auto)");
}

void check_groups(const fsdp::ShardingConfig& cfg, int context_parallel,
                  const runtime::MpiEnv& env) {
  std::string mine;
  try {
    comm::with_context(fsdp::group_layout(cfg.sharding, env.topology(), cfg.shard_group_size),
                       env.topology(), context_parallel);
  } catch (const runtime::UsageError& e) {
    mine = e.what();
  }
  const std::string agreed = agreed_failure(mine);
  if (!agreed.empty()) throw runtime::AgreedUsageError(agreed);
}

std::string agreed_failure(const std::string& mine) {
  int rank = 0, first = INT_MAX;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  int candidate = mine.empty() ? INT_MAX : rank;
  MPI_CHECK(MPI_Allreduce(&candidate, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  if (first == INT_MAX) return "";
  int world = 1;
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
  std::string msg = rank != first ? ""
                    : world > 1   ? mine + " (" + runtime::detail::identity() + ")"
                                  : mine;
  int len = static_cast<int>(msg.size());
  MPI_CHECK(MPI_Bcast(&len, 1, MPI_INT, first, MPI_COMM_WORLD));
  msg.resize(len);
  MPI_CHECK(MPI_Bcast(msg.data(), len, MPI_CHAR, first, MPI_COMM_WORLD));
  return msg;
}

namespace {

std::string local_token_check(const char* opt, const data::TokenFile& f,
                              const model::ModelConfig& model, const runtime::MpiEnv& env,
                              int64_t* bad_row, int64_t* loss_tokens) {
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
  const auto [begin, end] = data::balanced_part(f.rows(), env.size(), env.rank());
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
void check_loss_share(const char* opt, const data::TokenFile& f, int64_t loss_tokens) {
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

std::unique_ptr<data::TokenFile> open_token_file(const char* opt, const std::string& path,
                                                 const model::ModelConfig& model,
                                                 const runtime::MpiEnv& env, std::string* checked) {
  const runtime::Stopwatch clock;
  std::unique_ptr<data::TokenFile> f;
  std::string failure;
  int64_t bad_row = -1, loss_tokens = 0;
  try {
    f = std::make_unique<data::TokenFile>(path);
    failure = local_token_check(opt, *f, model, env, &bad_row, &loss_tokens);
  } catch (const runtime::UsageError& e) {
    failure = std::string(opt) + " " + e.what();
  }
  if (const std::string agreed = agreed_failure(failure); !agreed.empty())
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

namespace {

// dir, or its nearest existing ancestor: where create_directories would start.
fs::path existing_ancestor(const std::string& dir) {
  std::error_code ec;
  fs::path p = fs::absolute(dir, ec);
  while (!p.empty() && !fs::exists(p, ec) && p != p.parent_path()) p = p.parent_path();
  return p;
}

// Why no file can be created in the existing directory p (strerror), or "".
std::string cannot_create_in(const fs::path& p) {
  const fs::path probe = p / (".shardtrain-probe-" + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return std::strerror(errno);
  ::close(fd);
  ::unlink(probe.c_str());
  return "";
}

}  // namespace

std::string probe_writable_dir(const std::string& dir) {
  std::error_code ec;
  const fs::path p = existing_ancestor(dir);
  if (!fs::is_directory(p, ec)) return p.string() + " is not a directory";
  if (const std::string why = cannot_create_in(p); !why.empty())
    return "cannot create files in " + p.string() + ": " + why;
  return "";
}

std::string probe_writable_file(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return "it is a directory; name a file";
  const std::string dir = fs::path(path).parent_path().string();
  const fs::path p = existing_ancestor(dir.empty() ? "." : dir);
  if (!fs::is_directory(p, ec)) return p.string() + " is not a directory";
  const std::string why = cannot_create_in(p);
  if (why.empty() || fs::equivalent(p, dir.empty() ? "." : dir, ec)) return why;
  return why + " (in " + p.string() + ", where its missing directories would be made)";
}

void check_writable_outputs(const TrainOptions& o, const runtime::MpiEnv& env) {
  std::string failure;
  auto probe = [&](const std::string& opt, const std::string& dir, const char* hint) {
    if (!failure.empty() || dir.empty()) return;
    if (const std::string why = probe_writable_dir(dir); !why.empty())
      failure = opt + " " + dir + ": " + why + "; " + hint;
  };
  // One rank per node probes: a node whose mount is read-only is found too.
  if (env.topology().local_rank == 0) {
    probe("--checkpoint-dir", o.ckpt.dir,
          "choose a directory this job can write (shared storage on a cluster)");
    probe("--save-model", o.save_model, "choose a directory this job can write");
  }
  if (env.rank() == 0 && !o.train.metrics_file.empty()) {  // rank 0 alone writes the metrics
    const fs::path m(o.train.metrics_file);
    if (fs::is_directory(m))
      failure = "--metrics-file " + m.string() + " is a directory; name a file";
    probe("--metrics-file", m.parent_path().empty() ? "." : m.parent_path().string(),
          "choose a writable path");
    if (failure.empty() && fs::exists(m) && ::access(m.c_str(), W_OK) != 0)
      failure =
          "--metrics-file " + m.string() + ": " + std::strerror(errno) + "; choose a writable path";
  }
  if (env.rank() == 0)
    probe("--tensorboard", o.obs.tensorboard_dir,
          "choose a directory this job can write");  // rank 0 writes it
  if (const std::string agreed = agreed_failure(failure); !agreed.empty())
    throw runtime::AgreedUsageError(agreed);
}

void check_tokenizers(const exports::TokenizerSource& src, const std::vector<std::string>& data,
                      const std::string& prompt_tokenizer, const model::ModelConfig& model,
                      const runtime::MpiEnv& env) {
  std::string failure;
  if (env.rank() == 0) {  // one reader of the files; the verdict is shared
    try {
      for (const std::string& file : data)
        if (!file.empty())
          exports::check_export_tokenizer({src.weights, src.tokenizer, file}, model);
      exports::check_prompt_tokenizer(src.weights, prompt_tokenizer);
    } catch (const runtime::UsageError& e) {
      failure = e.what();
    }
  }
  if (const std::string agreed = agreed_failure(failure); !agreed.empty())
    throw runtime::AgreedUsageError(agreed);
}

}  // namespace shardtrain::cli
