#include "shardtrain/ckpt/manager.h"

#include <cstdio>
#include <filesystem>

#include "shardtrain/runtime/clock.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/logging.h"

namespace shardtrain::ckpt {
namespace {
// "1.23 s, 0.85 GB, 0.69 GB/s" for a file written or read in secs.
std::string seconds_and_rate(double secs, const std::string& path) {
  const double gb = static_cast<double>(std::filesystem::file_size(path)) / 1e9;
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.3f s, %.3f GB, %.2f GB/s", secs, gb, gb / std::max(secs, 1e-9));
  return buf;
}

bool is_rank_zero(MPI_Comm comm) {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  return rank == 0;
}
}  // namespace

void CheckpointConfig::validate() const {
  if (save_every < 0 || keep < 0)
    throw runtime::UsageError("--save-every and --keep-checkpoints must be >= 0");
  if (stripe.count < 0 || stripe.size < 0)
    throw runtime::UsageError("--ckpt-stripe-count and --ckpt-stripe-size must be >= 0");
  if (resume == "auto" && dir.empty())
    throw runtime::UsageError("--resume auto needs --checkpoint-dir");
  if (save_every > 0 && dir.empty())
    throw runtime::UsageError("--save-every needs --checkpoint-dir (where the checkpoints go)");
  if (!resume.empty() && resume != "auto" && !std::filesystem::exists(resume))
    throw runtime::UsageError("--resume: " + resume + " does not exist");
  if (overwrite && !resume.empty())
    throw runtime::UsageError(
        "--overwrite-checkpoints starts a new run and --resume continues one: pass only one of "
        "them");
  if (!dir.empty() && !overwrite && !continues_dir() && holds_checkpoints(dir)) {
    const std::string latest = latest_checkpoint(dir);
    throw runtime::UsageError(
        "--checkpoint-dir " + dir + " already holds checkpoints of another run" +
        (latest.empty() ? ""
                        : " (latest: " + std::filesystem::path(latest).filename().string() + ")") +
        "; continue it with --resume auto, pass a new --checkpoint-dir, or replace them with "
        "--overwrite-checkpoints");
  }
}

bool CheckpointConfig::continues_dir() const {
  if (resume == "auto") return true;
  std::error_code ec;
  return !resume.empty() &&
         std::filesystem::equivalent(std::filesystem::absolute(resume, ec).parent_path(), dir, ec);
}

Manager::Manager(CheckpointConfig cfg, fsdp::FsdpEngine& engine, const comm::ParallelDims& dims,
                 optim::Optimizer& optimizer, TrainState initial)
    : cfg_(std::move(cfg)),
      state_(std::move(initial)),
      // Collective: every rank builds the manager; a frozen base is checksummed only for a save or
      // a resume.
      registry_(training_state(engine, dims, optimizer, state_, cfg_.base_weights,
                               !cfg_.dir.empty() || !cfg_.resume.empty())) {
  if (!enabled()) return;
  if (dims.world->rank() == 0) {
    std::filesystem::create_directories(cfg_.dir);
    if (cfg_.overwrite) {
      const int removed = remove_checkpoints(cfg_.dir);
      if (removed)
        runtime::log::info("removed " + std::to_string(removed) + " files of an earlier run from " +
                           cfg_.dir + " (--overwrite-checkpoints)");
    }
  }
  if (cfg_.async) saver_ = std::make_unique<AsyncSaver>();
}

std::optional<TrainState> Manager::resume() {
  if (cfg_.resume.empty()) return std::nullopt;
  const auto candidates = resume_candidates(cfg_.resume, cfg_.dir);
  for (size_t i = 0; i < candidates.size(); ++i) {
    const std::string& path = candidates[i];
    const runtime::Stopwatch clock;
    try {
      load(path, registry_);  // every rank reaches the same verdict
      runtime::log::info("resumed from " + path + " at step " + std::to_string(state_.step) + " (" +
                         seconds_and_rate(clock.seconds(), path) + ")");
      return state_;
    } catch (const ResumeRefused&) {
      throw;  // another base or other adapter settings: an older checkpoint would be just as wrong
    } catch (const runtime::Error& e) {
      if (cfg_.resume != "auto") throw;
      if (is_rank_zero(registry_.ranks().world))
        runtime::log::warn(
            "checkpoint " + path +
            (i == 0 && path == latest_checkpoint(cfg_.dir) ? " (named by latest)" : "") +
            " cannot be loaded: " + e.what() +
            (i + 1 < candidates.size() ? "; falling back to " + candidates[i + 1] : ""));
    }
  }
  const std::string from = cfg_.base_weights.empty() ? "random initialization (--seed)"
                                                     : "the weights in " + cfg_.base_weights;
  runtime::log::info((candidates.empty() ? "no checkpoint in " + cfg_.dir + " yet"
                                         : "no loadable checkpoint in " + cfg_.dir) +
                     "; starting from " + from);
  return std::nullopt;
}

bool Manager::due(int64_t step, bool requested, bool final) const {
  if (!enabled()) return false;
  return requested || final || (cfg_.save_every > 0 && step % cfg_.save_every == 0);
}

double Manager::after_step(int64_t step, const std::string& requested_by, bool final,
                           const data::LoaderState& loader) {
  if (!due(step, !requested_by.empty(), final)) return 0;
  const std::string path = step_path(cfg_.dir, step);
  state_.step = step;
  state_.loader = loader;
  const std::string why = requested_by.empty() ? "" : " (" + requested_by + ")";
  if (saver_) {
    const double blocked = saver_->start(path, registry_, cfg_.stripe, cfg_.keep);
    runtime::log::info("checkpoint " + path + " started in the background; the loop was blocked " +
                       std::to_string(blocked) + " s" + why);
    if (final) saver_->wait();
    return blocked;
  }
  const runtime::Stopwatch clock;
  save(path, registry_, cfg_.stripe, cfg_.keep);
  const double secs = clock.seconds();
  runtime::log::info("checkpoint " + path + why + " (" + seconds_and_rate(secs, path) + ")");
  return secs;
}

void Manager::set_schedule(int64_t schedule_batch, int64_t schedule_steps) {
  state_.schedule_batch = schedule_batch;
  state_.schedule_steps = schedule_steps;
}

void Manager::finish() {
  if (saver_) saver_->wait();
}

}  // namespace shardtrain::ckpt
