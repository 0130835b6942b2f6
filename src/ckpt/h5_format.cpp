#include "shardtrain/ckpt/h5_format.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <future>
#include <mutex>

#include "shardtrain/ckpt/crc_assembly.h"
#include "shardtrain/io/h5.h"
#include "shardtrain/io/h5_types.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/mpi_env.h"

namespace shardtrain::ckpt {
namespace {

using io::h5::Handle;

// Selects the row-major flat range [b, e) of a dataset of `shape` (1-D or 2-D) in `space`.
void select_flat(hid_t space, const std::vector<int64_t>& shape, int64_t b, int64_t e) {
  H5_CHECK(H5Sselect_none(space));
  if (b >= e) return;
  if (shape.size() == 1) {
    const hsize_t start = b;
    const hsize_t count = e - b;
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
  const int64_t r0 = b / C;
  const int64_t c0 = b % C;
  const int64_t r1 = e / C;
  const int64_t c1 = e % C;
  if (r0 == r1) return block(r0, c0, 1, c1 - c0);
  block(r0, c0, 1, C - c0);          // the partial first row
  block(r0 + 1, 0, r1 - r0 - 1, C);  // whole rows
  block(r1, 0, 1, c1);               // the partial last row
}

// select_flat handles one or two dimensions; a state with other tensors fails before any I/O.
void check_specs(const std::vector<TensorGroup>& groups) {
  for (const auto& g : groups)
    for (const auto& spec : g.datasets)
      if (spec.shape.empty() || spec.shape.size() > 2)
        throw runtime::Error("checkpoint tensor " + g.group + "/" + spec.name +
                             " is not 1-D or 2-D, which the format stores");
}

const TensorSlice* find_slice(const TensorGroup& g, const std::string& name) {
  auto it = std::find_if(g.slices.begin(), g.slices.end(),
                         [&](const TensorSlice& s) { return s.name == name; });
  return it == g.slices.end() ? nullptr : &*it;
}

// A collective write that failed on some ranks only (a full disk shows on the MPI-IO aggregators)
// fails on all of them here, before the next collective call could leave the others waiting.
void agree_on_write(MPI_Comm writers, herr_t rc, const std::string& what) {
  const std::string mine = rc < 0 ? runtime::detail::h5_error_string() : "";
  int ok = rc >= 0 ? 1 : 0;
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, writers));
  if (!ok)
    throw runtime::Error(mine.empty() ? "another rank could not write " + what
                                      : "cannot write " + what + ": " + mine);
}

// The writers' file access: MPI-IO with the striping hints, and large datasets on stripe
// boundaries.
Handle parallel_fapl(MPI_Comm writers, const StripeOptions& stripe) {
  Handle fapl(H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)), H5Pclose);
  MPI_Info info;
  MPI_CHECK(MPI_Info_create(&info));
  if (stripe.count > 0)
    MPI_CHECK(MPI_Info_set(info, "striping_factor", std::to_string(stripe.count).c_str()));
  if (stripe.size > 0)
    MPI_CHECK(MPI_Info_set(info, "striping_unit", std::to_string(stripe.size).c_str()));
  MPI_CHECK(MPI_Info_set(info, "romio_cb_write", "enable"));  // two-phase collective buffering
  MPI_CHECK(MPI_Info_set(info, "cb_buffer_size", "1048576"));
  H5_CHECK(H5Pset_fapl_mpio(fapl, writers, info));
  MPI_Info_free(&info);
  const hsize_t align = stripe.size > 0 ? static_cast<hsize_t>(stripe.size) : hsize_t{1} << 20;
  H5_CHECK(H5Pset_alignment(fapl, align, align));
  return fapl;
}

// One group's datasets, each written collectively by every writer's slice. The HDF5 lock is
// taken per dataset, so the data loader's prefetch thread keeps reading during a background save.
void write_group(hid_t file, hid_t dxpl, MPI_Comm writers, const std::string& path,
                 const TensorGroup& g, std::unique_lock<std::recursive_mutex>& lock) {
  lock.lock();
  Handle grp(H5_CHECK(H5Gcreate2(file, g.group.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)),
             H5Gclose);
  lock.unlock();
  for (const auto& spec : g.datasets) {
    const TensorSlice* s = find_slice(g, spec.name);
    at::Tensor data = s ? s->data.contiguous() : at::empty({0}, at::kFloat);
    std::lock_guard<std::recursive_mutex> per_dataset(io::h5::library_lock());
    std::vector<hsize_t> dims(spec.shape.begin(), spec.shape.end());
    Handle space(H5_CHECK(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr)),
                 H5Sclose);
    Handle dset(H5_CHECK(H5Dcreate2(grp, spec.name.c_str(), H5T_IEEE_F32LE, space, H5P_DEFAULT,
                                    H5P_DEFAULT, H5P_DEFAULT)),
                H5Dclose);
    const hsize_t n = data.numel();
    Handle mem(H5_CHECK(H5Screate_simple(1, &n, nullptr)), H5Sclose);
    if (n == 0) H5_CHECK(H5Sselect_none(mem));
    select_flat(space, spec.shape, s ? s->offset : 0, s ? s->offset + s->numel : 0);
    agree_on_write(
        writers, H5Dwrite(dset, H5T_NATIVE_FLOAT, mem, space, dxpl, data.data_ptr()),  // collective
        path + ": tensor /" + g.group + "/" + spec.name);
  }
  lock.lock();
  grp.reset();
  lock.unlock();
}

// This rank's slices of one group, read into the live views with a serial open.
void read_group(hid_t file, const std::string& path, const std::string& state,
                const TensorGroup& g) {
  if (H5_CHECK(H5Lexists(file, g.group.c_str(), H5P_DEFAULT)) <= 0)
    throw runtime::UsageError(path + " holds no tensors of state \"" + state + "\" (no group /" +
                              g.group + "); it was saved without that state");
  for (const auto& s : g.slices) {
    auto spec = std::find_if(g.datasets.begin(), g.datasets.end(),
                             [&](const TensorSpec& d) { return d.name == s.name; });
    if (spec == g.datasets.end())
      throw runtime::Error("checkpoint state \"" + state +
                           "\" holds a slice of an unlisted tensor " + s.name);
    const std::string name = "/" + g.group + "/" + s.name;
    Handle dset = io::h5::open_dataset(file, name);  // names the file and the tensor when missing
    // float32 in the shape the model gives it, as write_group stores it: anything else is not a
    // file of ours.
    io::h5::check_dataset(
        dset, path, name, {io::h5::Element::kFloat32, spec->shape, ""},
        "the checkpoint was not written by shardtrain or is damaged; resume from another one");
    Handle space(H5_CHECK(H5Dget_space(dset)), H5Sclose);
    select_flat(space, spec->shape, s.offset, s.offset + s.numel);
    const hsize_t n = s.numel;
    Handle mem(H5_CHECK(H5Screate_simple(1, &n, nullptr)), H5Sclose);
    auto buf = at::empty({s.numel}, at::kFloat);
    H5_CHECK(H5Dread(dset, H5T_NATIVE_FLOAT, mem, space, H5P_DEFAULT, buf.data_ptr()));
    s.data.copy_(buf);
  }
}

// Every dataset's stored crc32 attribute, in local_crc_rows' order.
std::vector<int64_t> stored_crcs(hid_t file, const std::vector<TensorGroup>& groups) {
  std::vector<int64_t> out;
  for (const auto& g : groups)
    for (const auto& spec : g.datasets) {
      Handle dset = io::h5::open_dataset(file, "/" + g.group + "/" + spec.name);
      out.push_back(io::h5::read_attr_int(dset, "crc32"));
    }
  return out;
}

}  // namespace

int64_t tensor_bytes(const Snapshot& snap) {
  int64_t n = 0;
  for (const auto& g : snap.groups)
    for (const auto& spec : g.datasets) n += spec.numel();
  return n * static_cast<int64_t>(sizeof(float));
}

void write_file(const std::string& path, MPI_Comm comm, const Snapshot& snap,
                const StripeOptions& stripe) {
  MPI_Comm writers = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split(comm, snap.writer ? 0 : MPI_UNDEFINED, snap.shard_rank, &writers));
  if (!snap.writer) return;
  runtime::MpiComm own(writers);
  check_specs(snap.groups);
  // Checksums are computed on a second thread while the datasets are written, then attached.
  auto crc_rows = std::async(std::launch::async, [&] { return local_crc_rows(snap.groups); });
  std::unique_lock<std::recursive_mutex> lock(io::h5::library_lock());
  Handle fapl = parallel_fapl(writers, stripe);
  // Datasets stay contiguous (see docs/checkpoint-format.md: chunking measured 3-10x slower).
  Handle file = io::h5::create_file(path, fapl);
  Handle dxpl(H5_CHECK(H5Pcreate(H5P_DATASET_XFER)), H5Pclose);
  H5_CHECK(H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE));
  lock.unlock();
  for (const auto& g : snap.groups) write_group(file, dxpl, own.get(), path, g, lock);
  const auto crcs = assemble_crcs(writers, crc_rows.get());
  lock.lock();
  size_t d = 0;
  for (const auto& g : snap.groups)
    for (const auto& spec : g.datasets) {
      Handle dset = io::h5::open_dataset(file, g.group + "/" + spec.name);
      io::h5::write_attr(dset, "crc32", static_cast<int64_t>(crcs[d++]));
    }
  write_values(file, snap.values);
  agree_on_write(own.get(), H5Fflush(file, H5F_SCOPE_GLOBAL),
                 path + ": metadata");  // the closes below are collective
  dxpl.reset();
  file.reset();
  fapl.reset();
}

void read_file(const std::string& path, StateRegistry& reg) {
  const auto states = reg.states();
  std::vector<TensorGroup> groups;  // every state's live views
  std::vector<std::string> owners;  // the state of each group, for errors
  for (Stateful* p : states)
    for (auto& g : p->tensors()) {
      groups.push_back(std::move(g));
      owners.push_back(p->name());
    }
  check_specs(groups);
  std::vector<int64_t> stored;
  bool usage = false;
  std::string
      failure;  // a read can fail on some ranks only; all must learn it before the CRC collectives
  std::string refused;
  try {
    std::lock_guard<std::recursive_mutex> lock(io::h5::library_lock());
    Handle file = io::h5::open_file(path);
    const Values values = read_values(file, path);  // a foreign file or a newer format: exit 2
    for (Stateful* p : states) p->check(values.about(path, p->name()));
    for (size_t i = 0; i < groups.size(); ++i) read_group(file, path, owners[i], groups[i]);
    for (Stateful* p : states) p->load_values(values.about(path, p->name()));
    stored = stored_crcs(file, groups);
  } catch (const ResumeRefused& e) {
    refused = e.what();  // every rank reads the same attributes: all refuse alike
  } catch (const runtime::UsageError&
               e) {  // a truncated, foreign or mismatched file: the user's to fix (exit 2)
    failure = e.what();
    usage = true;
  } catch (const std::exception& e) {
    failure = e.what();
  }
  int bad = failure.empty() && refused.empty() ? 0
            : usage                            ? 1
                                               : 2;  // 2: some rank failed otherwise
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, reg.ranks().world));
  if (!refused.empty()) throw ResumeRefused(refused);
  if (bad == 1)
    throw runtime::AgreedUsageError(failure.empty() ? path + ": another rank found it damaged"
                                                    : failure);
  if (bad)
    throw runtime::Error(failure.empty() ? path + ": another rank could not read its slices"
                                         : failure);
  // Every dataset's CRC over its canonical bytes, assembled from the shard group's pieces.
  const auto crcs = assemble_crcs(reg.ranks().shard, local_crc_rows(groups));
  size_t d = 0;
  for (const auto& g : groups)
    for (const auto& spec : g.datasets) {
      if (stored[d] != static_cast<int64_t>(crcs[d]))
        throw runtime::Error(path + ": tensor /" + g.group + "/" + spec.name +
                             " fails its CRC-32 check; the checkpoint is corrupt");
      ++d;
    }
}

}  // namespace shardtrain::ckpt
