#include "shardtrain/ckpt/checkpoint.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <future>
#include <filesystem>
#include <fstream>

#include "shardtrain/ckpt/checkpoint_attrs.h"
#include "shardtrain/ckpt/save_failure.h"
#include "shardtrain/io/h5.h"
#include "shardtrain/runtime/checksum.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/file_sync.h"

namespace fs = std::filesystem;

namespace shardtrain::ckpt {
namespace {

using h5::Handle;

at::Tensor piece_tensor(const StatePiece& p, int which) {
  return which == 0 ? p.master : which == 1 ? p.exp_avg : p.exp_avg_sq;
}

}  // namespace

uint32_t crc_of(const at::Tensor& t) {
  const auto c = t.to(at::kCPU).contiguous();
  return crc32_bytes(c.data_ptr(), c.nbytes());
}

namespace {

// Selects the row-major flat range [b, e) of a dataset of `shape` (1-D or 2-D) in `space`.
void select_flat(hid_t space, const std::vector<int64_t>& shape, int64_t b, int64_t e) {
  H5_CHECK(H5Sselect_none(space));
  if (b >= e) return;
  if (shape.size() == 1) {
    const hsize_t start = b, count = e - b;
    H5_CHECK(H5Sselect_hyperslab(space, H5S_SELECT_SET, &start, nullptr, &count, nullptr));
    return;
  }
  const int64_t C = shape[1];
  auto block = [&](int64_t row, int64_t col, int64_t rows, int64_t cols) {
    if (rows <= 0 || cols <= 0) return;
    const hsize_t start[2] = {static_cast<hsize_t>(row), static_cast<hsize_t>(col)};
    const hsize_t count[2] = {static_cast<hsize_t>(rows), static_cast<hsize_t>(cols)};
    H5_CHECK(H5Sselect_hyperslab(space, H5S_SELECT_OR, start, nullptr, count, nullptr));
  };
  const int64_t r0 = b / C, c0 = b % C, r1 = e / C, c1 = e % C;
  if (r0 == r1) return block(r0, c0, 1, c1 - c0);
  block(r0, c0, 1, C - c0);            // the partial first row
  block(r0 + 1, 0, r1 - r0 - 1, C);    // whole rows
  block(r1, 0, 1, c1);                 // the partial last row
}

// This rank's (offset, numel, crc) row for each of the 3 x names datasets; -1 where it holds nothing.
std::vector<int64_t> local_crc_rows(const std::vector<StatePiece>& pieces, const std::vector<std::string>& names) {
  std::vector<int64_t> mine(names.size() * 3 * 3, -1);
  for (const auto& p : pieces) {
    const size_t d = std::find(names.begin(), names.end(), p.name) - names.begin();
    for (int w = 0; w < 3; ++w) {
      auto* row = &mine[(d * 3 + w) * 3];
      row[0] = p.param_offset, row[1] = p.numel, row[2] = crc_of(piece_tensor(p, w));
    }
  }
  return mine;
}

// Every rank's rows, combined in offset order per dataset into the CRC-32 of the whole dataset.
std::vector<uint32_t> combine_crc_rows(MPI_Comm comm, const std::vector<int64_t>& mine) {
  const size_t D = mine.size() / 3;
  int n = 1;
  MPI_CHECK(MPI_Comm_size(comm, &n));
  std::vector<int64_t> all(mine.size() * n);
  MPI_CHECK(MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_INT64_T, all.data(),
                          static_cast<int>(mine.size()), MPI_INT64_T, comm));
  std::vector<uint32_t> out(D);
  for (size_t d = 0; d < D; ++d) {
    std::vector<std::array<int64_t, 3>> parts;
    for (int r = 0; r < n; ++r) {
      const auto* row = &all[(r * D + d) * 3];
      if (row[0] >= 0 && row[1] > 0) parts.push_back({row[0], row[1], row[2]});
    }
    std::sort(parts.begin(), parts.end());
    uLong crc = crc32(0L, Z_NULL, 0);
    for (const auto& p : parts) crc = crc32_combine(crc, static_cast<uLong>(p[2]), static_cast<z_off_t>(4 * p[1]));
    out[d] = static_cast<uint32_t>(crc);
  }
  return out;
}

std::vector<std::string> spec_names(const std::vector<ParamSpec>& specs) {
  std::vector<std::string> n;
  for (const auto& s : specs) n.push_back(s.name);
  return n;
}

// A LoRA run's settings and base against the checkpoint's; throws ResumeRefused naming the difference.
void check_lora_resume(const std::string& path, const CheckpointAttrs& a, fsdp::FsdpEngine& engine, int64_t want_crc) {
  const auto& l = engine.config().lora;
  const int64_t rank = a.lora_rank;
  const std::string& targets = a.lora_targets;
  if (rank != l.rank || (rank > 0 && targets != join_lora_targets(l.targets)))
    throw ResumeRefused("--resume: " + path + " holds " +
                        (rank > 0 ? "LoRA rank " + std::to_string(rank) + " on " + targets : std::string("a full fine-tune")) +
                        " but this run asks for " +
                        (l.enabled() ? "LoRA rank " + std::to_string(l.rank) + " on " + join_lora_targets(l.targets)
                                     : std::string("a full fine-tune")) + "; resume with the checkpoint's --lora-* options");
  if (rank == 0) return;
  if (a.base_crc32 != want_crc) {
    const std::string& base = a.base_weights;
    throw ResumeRefused("--resume: " + path + " was trained on base weights " + (base.empty() ? "(seeded init)" : base) +
                        " (CRC-32 " + std::to_string(a.base_crc32) + ") but this run's base has CRC-32 " +
                        std::to_string(want_crc) + "; pass the same --weights as the run that saved it");
  }
}

// Another model's checkpoint: refused with both shapes named, before any tensor is read (an
// older checkpoint in the same directory would be just as wrong, so auto does not skip it).
void check_model_shape(const std::string& path, hid_t file, const ModelConfig& model) {
  if (!h5::has_attr(file, "model_config")) return;
  ModelConfig saved;
  try {
    saved = model_from_hf_json(nlohmann::json::parse(h5::read_attr_string(file, "model_config")), path);
  } catch (const std::exception& e) {
    throw UsageError(path + ": its model_config attribute cannot be read (" + e.what() + "); the checkpoint is damaged");
  }
  if (!same_shape(saved, model))
    throw ResumeRefused("--resume: " + path + " holds a model of shape " + describe_shape(saved) + " but --model " +
                        model.name + " has " + describe_shape(model) +
                        "; resume with the model it was saved from, or use another --checkpoint-dir");
}

}  // namespace

int64_t base_crc32(fsdp::FsdpEngine& engine) {
  const auto specs = llama_param_specs(engine.model());
  const auto per_tensor = combine_crc_rows(engine.groups().shard->mpi(), engine.base_crc_rows());
  uLong crc = crc32(0L, Z_NULL, 0);
  for (size_t d = 0; d < specs.size(); ++d) crc = crc32_combine(crc, per_tensor[d], static_cast<z_off_t>(4 * specs[d].numel()));
  return static_cast<int64_t>(crc);
}

std::vector<StatePiece> state_pieces(fsdp::FsdpEngine& engine, Optimizer& optimizer) {
  const auto& pieces = engine.pieces();
  auto& slots = optimizer.adamw().slots();
  if (slots.size() != pieces.size()) throw Error("checkpoint: the optimizer does not hold this engine's shards");
  std::vector<StatePiece> out;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const auto& p = pieces[i];
    out.push_back({p.name, p.shape, p.param_offset, p.numel, slots[i].param, slots[i].exp_avg, slots[i].exp_avg_sq});
  }
  return out;
}

Snapshot snapshot(fsdp::FsdpEngine& engine, Optimizer& optimizer, const TrainState& state, bool copy) {
  Snapshot snap;
  snap.pieces = state_pieces(engine, optimizer);
  snap.specs = engine.trainable_specs();
  snap.lora = engine.config().lora;
  // Host copies, so training may update the shards while a thread writes these; GPU shards are
  // always copied, since MPI-IO and the checksums read host memory.
  auto host = [&](const at::Tensor& t) { return t.is_cpu() && !copy ? t : t.to(at::kCPU, /*non_blocking=*/false, /*copy=*/true); };
  for (auto& p : snap.pieces) p.master = host(p.master), p.exp_avg = host(p.exp_avg), p.exp_avg_sq = host(p.exp_avg_sq);
  const auto& g = engine.groups();
  snap.model = engine.model();
  snap.state = state;
  snap.adam_step = optimizer.adamw().step_count();
  snap.world_size = g.world->size();
  snap.sharding = fsdp::sharding_name(engine.config().sharding);
  snap.writer = g.layout.replicate_rank == 0;  // one replica writes: its shard group holds every byte once
  snap.shard_rank = g.layout.shard_rank;
  return snap;
}

namespace {
// A collective write that failed on some ranks only (a full disk shows on the MPI-IO aggregators)
// fails on all of them here, before the next collective call could leave the others waiting.
void agree_on_write(MPI_Comm writers, herr_t rc, const std::string& what) {
  const std::string mine = rc < 0 ? detail::h5_error_string() : "";
  int ok = rc >= 0 ? 1 : 0;
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, writers));
  if (!ok) throw Error(mine.empty() ? "another rank could not write " + what : "cannot write " + what + ": " + mine);
}

// write() without its closing barrier: a rank that fails here must not leave the others in one.
void write_file(const std::string& path, MPI_Comm comm, const Snapshot& snap, const StripeOptions& stripe) {
  MPI_Comm writers = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split(comm, snap.writer ? 0 : MPI_UNDEFINED, snap.shard_rank, &writers));
  if (snap.writer) {
    MpiComm own(writers);
    const auto& pieces = snap.pieces;
    const auto names = spec_names(snap.specs);
    // Checksums are computed on a second thread while the datasets are written, then attached.
    auto crc_rows = std::async(std::launch::async, [&] { return local_crc_rows(pieces, names); });
    // The HDF5 lock is taken per call group, not for the whole save, so the data loader's
    // prefetch thread keeps reading while an asynchronous save writes.
    std::unique_lock<std::recursive_mutex> lock(h5::library_lock());
    Handle fapl(H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)), H5Pclose);
    MPI_Info info;
    MPI_CHECK(MPI_Info_create(&info));
    if (stripe.count > 0) MPI_CHECK(MPI_Info_set(info, "striping_factor", std::to_string(stripe.count).c_str()));
    if (stripe.size > 0) MPI_CHECK(MPI_Info_set(info, "striping_unit", std::to_string(stripe.size).c_str()));
    MPI_CHECK(MPI_Info_set(info, "romio_cb_write", "enable"));  // two-phase collective buffering
    MPI_CHECK(MPI_Info_set(info, "cb_buffer_size", "1048576"));
    H5_CHECK(H5Pset_fapl_mpio(fapl, writers, info));
    MPI_Info_free(&info);
    const hsize_t align = stripe.size > 0 ? static_cast<hsize_t>(stripe.size) : hsize_t{1} << 20;
    H5_CHECK(H5Pset_alignment(fapl, align, align));  // large datasets start on stripe boundaries
    // Datasets stay contiguous (see docs/checkpoint-format.md: chunking measured 3-10x slower).
    Handle file = h5::create_file(path, fapl);
    Handle dxpl(H5_CHECK(H5Pcreate(H5P_DATASET_XFER)), H5Pclose);
    H5_CHECK(H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE));
    lock.unlock();
    const auto& specs = snap.specs;
    for (int w = 0; w < 3; ++w) {
      lock.lock();
      Handle grp(H5_CHECK(H5Gcreate2(file, kGroups[w], H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)), H5Gclose);
      lock.unlock();
      for (size_t d = 0; d < specs.size(); ++d) {
        const auto& spec = specs[d];
        auto it = std::find_if(pieces.begin(), pieces.end(), [&](const auto& p) { return p.name == spec.name; });
        at::Tensor data = it == pieces.end() ? at::empty({0}, at::kFloat) : piece_tensor(*it, w).contiguous();
        std::lock_guard<std::recursive_mutex> per_dataset(h5::library_lock());
        std::vector<hsize_t> dims(spec.shape.begin(), spec.shape.end());
        Handle space(H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)), H5Sclose);
        Handle dset(H5_CHECK(H5Dcreate2(grp, spec.name.c_str(), H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT,
                                        H5P_DEFAULT)), H5Dclose);
        const hsize_t n = data.numel();
        Handle mem(H5_CHECK(H5Screate_simple(1, &n, nullptr)), H5Sclose);
        if (n == 0) H5_CHECK(H5Sselect_none(mem));
        select_flat(space, spec.shape, it == pieces.end() ? 0 : it->param_offset,
                    it == pieces.end() ? 0 : it->param_offset + it->numel);
        agree_on_write(own.get(), H5Dwrite(dset, H5T_NATIVE_FLOAT, mem, space, dxpl, data.data_ptr()),  // collective
                       path + ": tensor /" + kGroups[w] + "/" + spec.name);
      }
      lock.lock();
      grp.reset();
      lock.unlock();
    }
    const auto crcs = combine_crc_rows(writers, crc_rows.get());
    lock.lock();
    for (int w = 0; w < 3; ++w)
      for (size_t d = 0; d < names.size(); ++d) {
        Handle dset = h5::open_dataset(file, std::string(kGroups[w]) + "/" + names[d]);
        h5::write_attr(dset, "crc32", static_cast<int64_t>(crcs[d * 3 + w]));
      }
    CheckpointAttrs a;
    a.format_version = kFormatVersion;
    a.step = snap.state.step, a.loader = snap.state.loader, a.adam_step = snap.adam_step;
    a.world_size = snap.world_size, a.sharding = snap.sharding;
    a.run_config = snap.state.run_config, a.model_config = snap.state.model_config;
    if (snap.lora.enabled()) {  // the adapters' settings, and the base they belong to
      a.lora_rank = snap.lora.rank, a.lora_alpha = snap.lora.alpha, a.lora_dropout = snap.lora.dropout;
      a.lora_targets = join_lora_targets(snap.lora.targets);
      a.base_weights = snap.state.base_weights, a.base_crc32 = snap.state.base_crc32;
    }
    write_attrs(file, a);
    agree_on_write(own.get(), H5Fflush(file, H5F_SCOPE_GLOBAL), path + ": metadata");  // the closes below are collective
    dxpl.reset();
    file.reset();
    fapl.reset();
  }
}

// The bytes a checkpoint of snap needs: three fp32 tensors per dataset (metadata aside).
int64_t state_bytes(const Snapshot& snap) {
  int64_t n = 0;
  for (const auto& s : snap.specs) n += s.numel();
  return n * 3 * static_cast<int64_t>(sizeof(float));
}
}  // namespace

void write(const std::string& path, MPI_Comm comm, const Snapshot& snap, const StripeOptions& stripe) {
  write_file(path, comm, snap, stripe);
  MPI_CHECK(MPI_Barrier(comm));
}

void write_and_publish(const std::string& final_path, MPI_Comm comm, const Snapshot& snap, const StripeOptions& stripe,
                       int keep) {
  const std::string tmp = final_path + ".tmp";
  std::string error;
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  check_space(comm, final_path, state_bytes(snap));
  try {
    write_file(tmp, comm, snap, stripe);
    if (rank == 0) sync_file(tmp);  // a file system may report a full disk only now
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_on_save(comm, error, tmp, final_path, state_bytes(snap));  // every rank throws alike, or none does
  if (rank == 0) publish(tmp, final_path, keep);
  MPI_CHECK(MPI_Barrier(comm));  // nobody moves on before `latest` names the new file
}

void save(const std::string& final_path, fsdp::FsdpEngine& engine, Optimizer& optimizer, const TrainState& st,
          const StripeOptions& stripe, int keep) {
  write_and_publish(final_path, engine.groups().world->mpi(), snapshot(engine, optimizer, st, /*copy=*/false), stripe, keep);
}

TrainState load(const std::string& path, fsdp::FsdpEngine& engine, Optimizer& optimizer) {
  auto pieces = state_pieces(engine, optimizer);
  const auto names = spec_names(engine.trainable_specs());
  const int64_t want_base = engine.lora() ? base_crc32(engine) : -1;  // collective, before any rank may fail
  std::vector<int64_t> stored(names.size() * 3);  // every dataset's crc32 attribute
  TrainState st;
  bool usage = false;
  std::string failure, refused;  // a read can fail on some ranks only; all must learn it before the CRC collectives
  try {
    std::lock_guard<std::recursive_mutex> lock(h5::library_lock());
    Handle file = h5::open_file(path);
    const CheckpointAttrs attrs = read_attrs(file, path);  // a foreign file or a newer format: exit 2
    check_model_shape(path, file, engine.model());
    check_lora_resume(path, attrs, engine, want_base);
    for (int w = 0; w < 3; ++w)
      for (auto& p : pieces) {
        const std::string name = std::string("/") + kGroups[w] + "/" + p.name;
        Handle dset = h5::open_dataset(file, name);  // names the file and the tensor when missing
        const auto dims = h5::dataset_shape(dset);
        if (std::vector<int64_t>(dims.begin(), dims.end()) != p.shape)
          throw UsageError(path + ": tensor " + name + " has a different shape from the model's; check --model");
        Handle type(H5_CHECK(H5Dget_type(dset)), H5Tclose);
        if (H5Tget_class(type) != H5T_FLOAT || H5Tget_size(type) != 4)
          throw UsageError(path + ": tensor " + name + " is not float32");
        Handle space(H5_CHECK(H5Dget_space(dset)), H5Sclose);
        select_flat(space, p.shape, p.param_offset, p.param_offset + p.numel);
        const hsize_t n = p.numel;
        Handle mem(H5_CHECK(H5Screate_simple(1, &n, nullptr)), H5Sclose);
        auto buf = at::empty({p.numel}, at::kFloat);
        H5_CHECK(H5Dread(dset, H5T_NATIVE_FLOAT, mem, space, H5P_DEFAULT, buf.data_ptr()));
        piece_tensor(p, w).copy_(buf);
      }
    st.step = attrs.step, st.loader = attrs.loader;
    optimizer.adamw().set_step_count(attrs.adam_step);
    st.run_config = attrs.run_config, st.model_config = attrs.model_config;
    for (int w = 0; w < 3; ++w)
      for (size_t d = 0; d < names.size(); ++d) {
        Handle dset = h5::open_dataset(file, std::string("/") + kGroups[w] + "/" + names[d]);
        stored[d * 3 + w] = h5::read_attr_int(dset, "crc32");
      }
  } catch (const ResumeRefused& e) {
    refused = e.what();  // every rank reads the same attributes: all refuse alike
  } catch (const UsageError& e) {  // a truncated or foreign file: the user's to fix (exit 2)
    failure = e.what(), usage = true;
  } catch (const std::exception& e) {
    failure = e.what();
  }
  int bad = failure.empty() && refused.empty() ? 0 : usage ? 1 : 2;  // 2: some rank failed otherwise
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, engine.groups().world->mpi()));
  if (!refused.empty()) throw ResumeRefused(refused);
  if (bad == 1) throw AgreedUsageError(failure.empty() ? path + ": another rank found it damaged" : failure);
  if (bad) throw Error(failure.empty() ? path + ": another rank could not read its slices" : failure);
  // Every dataset's CRC over its canonical bytes, assembled from the shard group's pieces.
  const auto crcs = combine_crc_rows(engine.groups().shard->mpi(), local_crc_rows(pieces, names));
  for (int w = 0; w < 3; ++w)
    for (size_t d = 0; d < names.size(); ++d)
      if (stored[d * 3 + w] != static_cast<int64_t>(crcs[d * 3 + w]))
        throw Error(path + ": tensor /" + kGroups[w] + "/" + names[d] + " fails its CRC-32 check; the checkpoint is corrupt");
  return st;
}

}  // namespace shardtrain::ckpt
