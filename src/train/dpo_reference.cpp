#include "shardtrain/train/dpo_reference.h"

#include <mpi.h>

#include <filesystem>

#include "shardtrain/data/data_identity.h"
#include "shardtrain/io/h5.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/logging.h"
#include "shardtrain/train/logps_objective.h"
#include "shardtrain/train/validator.h"

namespace shardtrain::train {

namespace {

ReferenceFn from_file(at::Tensor logps) {
  return [logps](const model::MicroBatch& mb) {
    const at::Tensor rows = at::tensor(mb.whole.sample_ids, at::kLong);
    return logps.index_select(0, rows);
  };
}

// True when every lora_B is zero (PEFT's fresh init): the adapters then add nothing, and the
// base alone is the starting model.
bool zero_adapter_output(const io::SafetensorsModel& adapter) {
  for (const std::string& name : adapter.names())
    if (name.find("lora_B") != std::string::npos && adapter.read(name).ne(0).any().item<bool>())
      return false;
  return true;
}

// The rows' answer log-probabilities from an engine's forward; adapters = false: the frozen base
// alone.
ReferenceFn logps_of(fsdp::FsdpEngine& engine, comm::ParallelDims& dims, bool adapters) {
  auto objective = std::make_shared<RowLogpsObjective>(*dims.context, adapters);
  return
      [&engine, objective](const model::MicroBatch& mb) { return engine.evaluate(mb, *objective); };
}

// Absolute: a resume may name the same file from another directory.
std::string absolute(const std::string& path) {
  return std::filesystem::absolute(path).lexically_normal().string();
}

}  // namespace

std::string reference_identity(const ReferenceSources& s) {
  std::string id =
      s.reference_logps.empty()
          ? (s.weights.empty() ? "a random start (--seed " + std::to_string(s.seed) + ")"
                               : "--weights " + absolute(s.weights)) +
                (s.adapter_init.empty() ? "" : " with --lora-init " + absolute(s.adapter_init))
          : "--reference-logps " + absolute(s.reference_logps);
  if (!s.val_reference_logps.empty())
    id += "; validation: --val-reference-logps " + absolute(s.val_reference_logps);
  return id;
}

Reference make_reference(const ReferenceSources& p, fsdp::FsdpEngine& engine,
                         comm::ParallelDims& groups, const io::SafetensorsModel* weights,
                         const io::SafetensorsModel* adapter, const data::TokenFile& train,
                         const data::TokenFile* val) {
  Reference r;
  ReferenceFn model;  // the reference model's forward, when one is needed
  const bool needs_model = p.reference_logps.empty() || (val && p.val_reference_logps.empty());
  // --lora-init with trained adapters: the starting model is base + those adapters (TRL's "ref"
  // copy of a pretrained adapter); without them, a LoRA run's base alone is.
  const bool trained_adapter = adapter && !zero_adapter_output(*adapter);
  if (needs_model && engine.layout().base_frozen() && !trained_adapter) {
    model = logps_of(engine, groups, /*adapters=*/false);
    r.what = "the base model (LoRA's adapters switched off)";
  } else if (needs_model) {
    r.frozen = std::make_unique<fsdp::FsdpEngine>(engine.spec(), groups, p.seed, weights,
                                                  trained_adapter ? adapter : nullptr);
    model = logps_of(*r.frozen, groups, /*adapters=*/true);
    r.what = std::string("a frozen sharded copy of the starting weights") +
             (trained_adapter ? " and --lora-init's adapters" : "");
  }
  if (!p.reference_logps.empty()) {
    r.train = from_file(read_logps("--reference-logps", p.reference_logps, train));
    r.what = "--reference-logps " + p.reference_logps +
             (r.what.empty() ? std::string() : "; validation: " + r.what);
  } else {
    r.train = model;
  }
  if (val)
    r.val = p.val_reference_logps.empty()
                ? model
                : from_file(read_logps("--val-reference-logps", p.val_reference_logps, *val));
  return r;
}

ReferenceFn eval_reference(const std::string& reference_logps, fsdp::FsdpEngine& engine,
                           comm::ParallelDims& dims, const data::TokenFile& data,
                           std::string* what) {
  if (!reference_logps.empty()) {
    *what = "--reference-logps " + reference_logps;
    return from_file(read_logps("--reference-logps", reference_logps, data));
  }
  if (!engine.layout().base_frozen())  // parse_eval refuses this combination
    throw runtime::Error(
        "eval --objective dpo: no reference (neither --reference-logps nor --lora)");
  *what = "the base model (the adapter switched off)";
  return logps_of(engine, dims, /*adapters=*/false);
}

void check_objective_data(bool dpo,
                          const std::vector<std::pair<const char*, const data::TokenFile*>>& files,
                          const char* pairs_without_dpo) {
  for (const auto& [opt, file] : files) {
    if (!file) continue;
    if (dpo && !file->preference())
      throw runtime::AgreedUsageError(std::string("--objective dpo: ") + opt + " " + file->path() +
                                      " holds no preference pairs; prepare it with 'shardtrain "
                                      "prepare --format preference'");
    if (!dpo && file->preference() && pairs_without_dpo)
      throw runtime::AgreedUsageError(std::string(opt) + " " + file->path() +
                                      " holds preference pairs (chosen, then rejected); " +
                                      pairs_without_dpo);
  }
}

void save_logps(const std::string& path, fsdp::FsdpEngine& engine, const comm::ParallelDims& g,
                const data::TokenFile& data, int64_t batch_size, int rank) {
  std::vector<double> logps(static_cast<size_t>(data.rows()), 0.0);
  RowLogpsObjective objective(*g.context);
  for_each_batch(data, batch_size, 0, g.data_rank(), g.data_world(), [&](const model::Batch& b) {
    const at::Tensor l = engine.evaluate(fsdp::context_split(b, g), objective).contiguous();
    for (size_t i = 0; i < b.sample_ids.size(); ++i)
      logps[static_cast<size_t>(b.sample_ids[i])] = l[static_cast<int64_t>(i)].item<double>();
  });
  // Each row is one data rank's (a context group's ranks all hold its whole sum: the group's
  // first gives it): the sum over ranks is every row's.
  if (g.context->rank() != 0) std::fill(logps.begin(), logps.end(), 0.0);
  MPI_CHECK(MPI_Reduce(rank == 0 ? MPI_IN_PLACE : logps.data(), logps.data(),
                       static_cast<int>(logps.size()), MPI_DOUBLE, MPI_SUM, 0, g.world->mpi()));
  if (rank != 0) return;
  auto file = io::h5::create_file(path);
  io::h5::write_matrix(file, "logps", logps, logps.size(), 1);  // [rows, 1]
  io::h5::write_attr(file, "token_file", data::token_file_identity(data));
  io::h5::write_attr(file, "token_file_path", data.path());
  io::h5::write_attr(file, "rows", data.rows());
}

at::Tensor read_logps(const std::string& opt, const std::string& path,
                      const data::TokenFile& data) {
  auto file = io::h5::open_file(path);
  const std::string id =
      io::h5::has_attr(file, "token_file") ? io::h5::read_attr_string(file, "token_file") : "";
  if (id != data::token_file_identity(data))
    throw runtime::UsageError(opt + " " + path +
                              " holds the log-probabilities of another token "
                              "file than " +
                              data.path() + "; re-run 'shardtrain eval --save-logps' on it");
  const auto dset = io::h5::open_dataset(file, "logps");
  std::vector<int64_t> rows(static_cast<size_t>(data.rows()));
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int64_t>(i);
  // The identity covers the row count: the file holds exactly data's rows.
  return at::tensor(io::h5::read_rows<double>(dset, rows, 1), at::kDouble);
}

}  // namespace shardtrain::train
