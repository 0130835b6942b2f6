#include "shardtrain/cli/run_checks.h"

#include "shardtrain/cli/engine_setup.h"

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

spec::TrainSpec train_spec(const TrainOptions& o) {
  spec::TrainSpec s;
  s.sharding = o.fsdp;
  s.run = o.run;
  s.context_parallel = o.context_parallel;
  s.batch_size = o.train.batch_size;
  s.grad_accum = o.train.grad_accum;
  s.dpo = o.preference.enabled;
  s.reference_logps = o.preference.reference_logps;
  return s;
}

void check_run(const TrainOptions& o, const runtime::MpiEnv& env) {
  try {  // pure: every rank refuses alike
    spec::validate(train_spec(o), o.model, /*packed=*/false);
  } catch (const runtime::UsageError& e) {
    throw runtime::AgreedUsageError(e.what());
  }
  if (o.run.fp8 == model::Fp8Mode::kOff) return;
  // Each rank asks about its own GPU (a mixed allocation differs): the first refusal is all's.
  const comm::DeviceChoice d = comm::choose_device(o.fsdp.device, env);
  const std::string mine = model::fp8_device_problem(
      d.cuda ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(d.index))
             : at::Device(at::kCPU));
  const std::string opt = std::string("--fp8 ") + model::fp8_mode_name(o.run.fp8) + ": ";
  const std::string agreed =
      runtime::agreed_failure(mine.empty() ? "" : opt + mine + "; or run without --fp8");
  if (!agreed.empty()) throw runtime::AgreedUsageError(agreed);
}

void check_groups(const fsdp::ShardingConfig& cfg, int context_parallel,
                  const runtime::MpiEnv& env) {
  std::string mine;
  try {
    mesh_layout(cfg, context_parallel, env.topology());
  } catch (const runtime::UsageError& e) {
    mine = e.what();
  }
  const std::string agreed = runtime::agreed_failure(mine);
  if (!agreed.empty()) throw runtime::AgreedUsageError(agreed);
}

void check_writable_outputs(const TrainOptions& o, const runtime::MpiEnv& env) {
  std::string failure;
  auto probe = [&](const std::string& opt, const std::string& dir, const char* hint) {
    if (!failure.empty() || dir.empty()) return;
    if (const std::string why = runtime::probe_writable_dir(dir); !why.empty())
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
  if (const std::string agreed = runtime::agreed_failure(failure); !agreed.empty())
    throw runtime::AgreedUsageError(agreed);
}

}  // namespace shardtrain::cli
